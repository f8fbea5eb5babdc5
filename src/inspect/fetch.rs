//! Asks a running numa-shim for its view: one plain HTTP/1.0 `GET /placement` over TCP to the
//! metrics endpoint, blocking, with timeouts. Only `http://host:port` endpoints.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::PlacementView;

const TIMEOUT: Duration = Duration::from_secs(5);

/// Why the view could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("endpoint {0:?} is not http://host:port")]
    Endpoint(String),
    #[error("cannot reach numa-shim at {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("numa-shim at {endpoint} answered {status}: {body}")]
    Status {
        endpoint: String,
        status: String,
        body: String,
    },
    #[error("numa-shim at {endpoint} sent an unreadable view: {source}")]
    Decode {
        endpoint: String,
        #[source]
        source: serde_json::Error,
    },
}

/// `GET {endpoint}/placement`, decoded.
pub fn fetch(endpoint: &str) -> Result<PlacementView, FetchError> {
    let authority = endpoint
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| FetchError::Endpoint(endpoint.to_string()))?;
    let connect = |source| FetchError::Connect {
        endpoint: endpoint.to_string(),
        source,
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(connect)?
        .next()
        .ok_or_else(|| FetchError::Endpoint(endpoint.to_string()))?;
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(connect)?;
    stream.set_read_timeout(Some(TIMEOUT)).map_err(connect)?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(connect)?;
    let request =
        format!("GET /placement HTTP/1.0\r\nHost: {authority}\r\nAccept: application/json\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(connect)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(connect)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(FetchError::Status {
            endpoint: endpoint.to_string(),
            status: status.to_string(),
            body: body.trim().to_string(),
        });
    }
    serde_json::from_str(body).map_err(|source| FetchError::Decode {
        endpoint: endpoint.to_string(),
        source,
    })
}
