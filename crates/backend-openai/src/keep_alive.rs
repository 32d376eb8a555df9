//! Reusing connections no longer than the server allows, and telling a
//! request that never reached the server from one that may have.
//!
//! Servers close idle keep-alive connections (llama.cpp's `llama-server`
//! after 5 s, announced as `Keep-Alive: timeout=5, max=100`). A client that
//! sends on a pooled connection just as the server closes it gets the
//! connection closed under its request, although the server never read it.
//! Three things keep that from failing requests:
//!
//! * `Connection: close` is obeyed by hyper: the connection is not pooled.
//!   A server that announces `max=M` says `Connection: close` on the `M`th
//!   response (llama.cpp does), so `max` needs nothing more. Neither reqwest
//!   nor hyper-util tells which connection a request used or how many
//!   requests it carried, so the client does not count them itself.
//! * `Keep-Alive: timeout=T` sets how long the pool keeps a connection idle:
//!   [`idle_timeout_for`] `T`, so a connection is dropped before the server
//!   closes it. The pool checks the idle time when it hands a connection
//!   out, so none older is ever reused.
//! * A send that fails [`unanswered`] is sent once more on a fresh
//!   connection (see `OpenAiHttpBackend`).

use std::time::Duration;

/// What a server announced in its `Keep-Alive` header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KeepAlive {
    /// `timeout=T`: the server closes a connection idle for `T` seconds.
    pub timeout: Option<Duration>,
    /// `max=M`: the requests the connection may still carry.
    pub max: Option<u64>,
}

impl KeepAlive {
    /// Parses `timeout=5, max=100` (parameters in any order and case;
    /// unknown or malformed ones are ignored).
    pub fn parse(value: &str) -> Self {
        let mut announced = KeepAlive::default();
        for part in value.split(',') {
            let Some((name, number)) = part.split_once('=') else {
                continue;
            };
            let number = number.trim().trim_matches('"');
            match name.trim().to_ascii_lowercase().as_str() {
                "timeout" => {
                    announced.timeout = number.parse::<u64>().ok().map(Duration::from_secs);
                }
                "max" => announced.max = number.parse().ok(),
                _ => {}
            }
        }
        announced
    }
}

/// How long the pool keeps a connection idle for a server that closes idle
/// connections after `announced`: a second less, or half of it below 2 s,
/// so a request never goes out on a connection the server is closing.
/// Zero means: keep no idle connection.
pub(crate) fn idle_timeout_for(announced: Duration) -> Duration {
    announced.saturating_sub((announced / 2).min(Duration::from_secs(1)))
}

/// Whether a failed send (no response head received) can be sent again
/// without the server having answered any of it: the connection was closed
/// or reset under the request before a complete response head arrived —
/// hyper's "connection closed before message completed" (`IncompleteMessage`),
/// or a reset or broken pipe while writing or waiting.
///
/// What hyper tells and what it does not: a request that hyper could not
/// even start writing (the pooled connection already known closed) is sent
/// again by hyper-util itself on another connection and never seen here.
/// For what is seen here, hyper does not say how much of the request was
/// written; it does say that no complete response head arrived. A server
/// that closes an idle connection has not read the request; a server that
/// read it and then died without a byte of answer looks the same, and is
/// the one case where the one retry repeats work the server started.
/// Everything else is never retried: connect failures, timeouts, an error
/// status, and any error once a response head has arrived.
pub(crate) fn unanswered(error: &reqwest::Error) -> bool {
    if error.is_timeout() || error.is_connect() || error.is_status() || error.is_body() {
        return false;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && hyper.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
            );
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keep_alive_header_gives_the_timeout_and_the_requests_left() {
        assert_eq!(
            KeepAlive::parse("timeout=5, max=100"),
            KeepAlive {
                timeout: Some(Duration::from_secs(5)),
                max: Some(100)
            }
        );
        assert_eq!(
            KeepAlive::parse("MAX=3,Timeout=\"2\""),
            KeepAlive {
                timeout: Some(Duration::from_secs(2)),
                max: Some(3)
            }
        );
        assert_eq!(KeepAlive::parse("timeout=x, foo"), KeepAlive::default());
    }

    #[test]
    fn idle_connections_are_dropped_before_the_server_closes_them() {
        let s = Duration::from_secs;
        assert_eq!(idle_timeout_for(s(5)), s(4));
        assert_eq!(idle_timeout_for(s(90)), s(89));
        assert_eq!(idle_timeout_for(s(1)), Duration::from_millis(500));
        assert_eq!(idle_timeout_for(s(0)), Duration::ZERO);
    }
}
