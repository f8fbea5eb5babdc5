//! A test API server on loopback speaking the real wire format: each request is recorded, then
//! answered with the next reply the test queued (a JSON body with a status, or a chunked watch
//! stream fed line by line). HTTPS with a CA and server certificate made here, or plain HTTP.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use rustls::pki_types::PrivateKeyDer;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub(super) path: String,
    pub(super) authorization: Option<String>,
}

pub(super) enum Reply {
    Json(u16, String),
    Stream(mpsc::UnboundedReceiver<String>),
}

/// A CA and a server certificate for 127.0.0.1/localhost signed by it.
pub(super) struct Pki {
    pub(super) ca_pem: String,
    pub(super) server: Arc<rustls::ServerConfig>,
}

impl Pki {
    pub(super) fn new() -> Self {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test kubernetes ca");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .unwrap();
        let cert = params.signed_by(&key, &ca).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        Self {
            ca_pem: ca.pem(),
            server: Arc::new(server),
        }
    }
}

pub(super) struct TestServer {
    pub(super) addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    replies: mpsc::UnboundedSender<Reply>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Body = BoxBody<Bytes, Infallible>;

impl TestServer {
    pub(super) async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::unbounded_channel();
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (seen, rx, acceptor) = (seen2.clone(), rx.clone(), acceptor.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (seen, rx) = (seen.clone(), rx.clone());
                        async move { Ok::<_, Infallible>(answer(req, &seen, &rx).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    match acceptor {
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                let _ = http.serve_connection(TokioIo::new(tls), service).await;
                            }
                        }
                        None => {
                            let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            seen,
            replies: tx,
            task,
        }
    }

    pub(super) fn reply(&self, status: u16, body: impl Into<String>) {
        self.replies.send(Reply::Json(status, body.into())).unwrap();
    }

    /// Queues a watch stream; send lines (each ends with '\n') through the returned sender,
    /// drop it to end the stream.
    pub(super) fn stream(&self) -> mpsc::UnboundedSender<String> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.replies.send(Reply::Stream(rx)).unwrap();
        tx
    }

    /// Waits until `n` requests arrived and returns them all.
    pub(super) async fn requests(&self, n: usize) -> Vec<Seen> {
        for _ in 0..500 {
            let seen = self.seen.lock().unwrap().clone();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} requests, got {:?}", self.seen.lock().unwrap());
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    seen: &Mutex<Vec<Seen>>,
    replies: &tokio::sync::Mutex<mpsc::UnboundedReceiver<Reply>>,
) -> hyper::Response<Body> {
    seen.lock().unwrap().push(Seen {
        path: req.uri().to_string(),
        authorization: req
            .headers()
            .get(http::header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_string()),
    });
    let reply = replies.lock().await.recv().await;
    let json = |status: u16, body: Body| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    };
    match reply {
        Some(Reply::Json(status, body)) => json(status, Full::new(Bytes::from(body)).boxed()),
        Some(Reply::Stream(rx)) => {
            let frames = UnboundedReceiverStream::new(rx)
                .map(|line| Ok::<_, Infallible>(Frame::data(Bytes::from(line))));
            json(200, BodyExt::boxed(StreamBody::new(frames)))
        }
        None => json(503, Full::new(Bytes::new()).boxed()),
    }
}
