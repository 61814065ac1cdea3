//! The crate's one error type.
//!
//! `Error` is opaque: callers branch on [`Error::code`] (a stable string, also the OpenAI
//! `error.code`) and [`Error::param`] (the request field at fault), never on the message text.

use std::fmt;

/// What went wrong, privately; the public view is [`Error::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The input is malformed or out of range (an OpenAI 400).
    InvalidInput,
    /// The input is well-formed but needs more than a documented bound (an OpenAI 400).
    LimitExceeded,
    /// A token mask allows no token, so nothing can be sampled.
    NoAllowedToken,
    /// The GPU adapter, device or a kernel failed.
    Gpu,
}

/// The error of every fallible function in this crate.
#[derive(Debug)]
pub struct Error {
    kind: Kind,
    message: String,
    param: Option<String>,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    fn new(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            param: None,
            source: None,
        }
    }

    /// Malformed or out-of-range input.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(Kind::InvalidInput, message)
    }

    /// Input that needs more than a documented limit; the message names the limit.
    pub fn limit_exceeded(message: impl Into<String>) -> Self {
        Self::new(Kind::LimitExceeded, message)
    }

    /// A mask that allows no token.
    pub fn no_allowed_token(message: impl Into<String>) -> Self {
        Self::new(Kind::NoAllowedToken, message)
    }

    /// A GPU failure (no adapter, device lost, out of memory, a kernel error).
    pub fn gpu(message: impl Into<String>) -> Self {
        Self::new(Kind::Gpu, message)
    }

    /// Names the request field at fault (the OpenAI `error.param`).
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Chains the underlying error, returned by [`std::error::Error::source`].
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// A stable machine-readable code, used as the OpenAI `error.code`.
    pub fn code(&self) -> &'static str {
        match self.kind {
            Kind::InvalidInput => "invalid_input",
            Kind::LimitExceeded => "limit_exceeded",
            Kind::NoAllowedToken => "no_allowed_token",
            Kind::Gpu => "gpu_error",
        }
    }

    /// The request field at fault, when known.
    pub fn param(&self) -> Option<&str> {
        self.param.as_deref()
    }

    /// The human-readable message (names the input and, for limits, the limit).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the input was refused for exceeding a documented limit.
    pub fn is_limit_exceeded(&self) -> bool {
        self.kind == Kind::LimitExceeded
    }

    /// Whether this is the caller's fault (an HTTP 400) rather than the engine's (a 500).
    pub fn is_client_error(&self) -> bool {
        matches!(self.kind, Kind::InvalidInput | Kind::LimitExceeded)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
