// The extension's service worker does one thing: the toolbar button opens the side panel. The
// engine never runs here (Chromium may stop a service worker at any time); it runs in a Web
// Worker started by the side panel page, which lives as long as the panel is open.
chrome.sidePanel.setPanelBehavior({ openPanelOnActionClick: true }).catch((e) => console.warn(e));
