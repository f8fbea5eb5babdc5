//! One HTTP/1.1 request to the API server over TCP, or TLS (rustls) for `https`, with the bearer
//! token; returns the response with its body still streaming. Knows nothing of pods.

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tracing::debug;

use super::connection::Connection;
use super::ApiServerError;

/// How long connecting (TCP + TLS) may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// GETs `path_and_query` (starting with `/`) under the connection's server URL. Non-2xx
/// answers become errors: 410 `Gone`, anything else `Status` with the start of the body.
pub(super) async fn get(
    conn: &Connection,
    path_and_query: &str,
) -> Result<Response<Incoming>, ApiServerError> {
    request(conn, Method::GET, path_and_query, None).await
}

/// A request body and its `Content-Type`.
pub(crate) struct Body {
    pub(crate) content_type: &'static str,
    pub(crate) bytes: Vec<u8>,
}

/// Sends `method` to `path_and_query` with an optional body; errors as [`get`].
pub(crate) async fn request(
    conn: &Connection,
    method: Method,
    path_and_query: &str,
    body: Option<Body>,
) -> Result<Response<Incoming>, ApiServerError> {
    let url = format!("{}{path_and_query}", conn.server);
    let http_err = |source| ApiServerError::Http {
        url: url.clone(),
        source,
    };
    let connect_err = |source| ApiServerError::Connect {
        url: url.clone(),
        source,
    };
    let mut request = hyper::Request::builder()
        .method(method.clone())
        .uri(format!("{}{path_and_query}", conn.prefix))
        .header(http::header::HOST, host_header(conn))
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("numa-shim/", env!("CARGO_PKG_VERSION")),
        );
    if let Some(token) = conn.token()? {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let bytes = match body {
        Some(body) => {
            request = request.header(http::header::CONTENT_TYPE, body.content_type);
            Bytes::from(body.bytes)
        }
        None => Bytes::new(),
    };
    let request = request
        .body(Full::new(bytes))
        .map_err(|e| ApiServerError::Url {
            url: url.clone(),
            reason: e.to_string(),
        })?;
    let connect = async {
        let tcp = TcpStream::connect((conn.host.as_str(), conn.port))
            .await
            .map_err(connect_err)?;
        let _ = tcp.set_nodelay(true);
        Ok::<_, ApiServerError>(tcp)
    };
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| connect_err(std::io::ErrorKind::TimedOut.into()))??;
    let response = match &conn.tls {
        None => exchange(tcp, request).await.map_err(http_err)?,
        Some(tls) => {
            let connector = tokio_rustls::TlsConnector::from(tls.config());
            let tls =
                tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(tls.name.clone(), tcp))
                    .await
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))
                    .and_then(|r| r)
                    .map_err(|source| ApiServerError::Tls {
                        url: url.clone(),
                        source,
                    })?;
            exchange(tls, request).await.map_err(http_err)?
        }
    };
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    if status == http::StatusCode::GONE {
        return Err(ApiServerError::Gone { url });
    }
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let mut text = String::from_utf8_lossy(&body).into_owned();
    text.truncate(text.floor_char_boundary_compat(512));
    Err(ApiServerError::Status {
        method: method.to_string(),
        url,
        status: status.as_u16(),
        body: text,
    })
}

async fn exchange<T>(
    io: T,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Response<Incoming>, hyper::Error>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            debug!(error = %e, "api server connection closed");
        }
    });
    sender.send_request(request).await
}

fn host_header(conn: &Connection) -> String {
    let host = if conn.host.contains(':') {
        format!("[{}]", conn.host)
    } else {
        conn.host.clone()
    };
    format!("{host}:{}", conn.port)
}

/// `str::floor_char_boundary` is not stable on the crate's minimum Rust version.
trait FloorCharBoundary {
    fn floor_char_boundary_compat(&self, index: usize) -> usize;
}

impl FloorCharBoundary for String {
    fn floor_char_boundary_compat(&self, index: usize) -> usize {
        (0..=index.min(self.len()))
            .rev()
            .find(|&i| self.is_char_boundary(i))
            .unwrap_or(0)
    }
}
