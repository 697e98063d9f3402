//! What every route of the bridge's loopback server answers with: the body and response types,
//! a whole body, a `text/plain` answer, and query strings ([`query`]).

pub mod query;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

/// The body type of every loopback response.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A response of the loopback server.
pub type Resp = Response<Body>;

/// A whole body in memory.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

/// A short `text/plain` response.
pub fn text(status: StatusCode, body: impl Into<String>) -> Resp {
    let mut r = Response::new(full(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}
