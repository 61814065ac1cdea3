// The extension's service worker does one thing: the toolbar button opens the side panel. The
// engine never runs here (Chromium may stop a service worker at any time); it runs in a Web
// Worker started by the side panel page, which lives as long as the panel is open.
//
// The panel is opened from action.onClicked rather than with setPanelBehavior's
// openPanelOnActionClick: that one skips onClicked, and with it Chrome does not count the click
// as invoking the extension on the page, so activeTab (the panel's only access to the page's
// selection) would not be granted. sidePanel.open needs the click's user gesture: no await
// before it.
chrome.action.onClicked.addListener((tab) => {
  chrome.sidePanel.open({ windowId: tab.windowId }).catch((e) => console.warn(e));
});
