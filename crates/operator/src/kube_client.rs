//! The Kubernetes client `hangar run` uses: kube's own, with every apiserver answer counted by
//! method and status code into [`crate::metrics::Metrics::kube_request`]
//! (`rest_client_requests_total`, controller-runtime's name).
//!
//! Why at the transport: some calls fail on purpose without a trace — events are published in
//! the background and their errors dropped, reflectors retry failed watches by themselves — so
//! only the transport sees every answer. A permission the RBAC lacks shows up as `code="403"`,
//! whichever code path made the call; the chart tests run the binary with the chart's own
//! ServiceAccount and assert that no such series appears.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use kube::client::{Body, ClientBuilder};

use crate::metrics::Metrics;

/// A client for `config` whose requests are counted into `metrics`.
pub fn counted(config: kube::Config, metrics: Arc<Metrics>) -> Result<kube::Client, kube::Error> {
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&CountLayer(metrics))
        .build())
}

/// Wraps a service in [`Counted`].
#[derive(Clone, Debug)]
pub struct CountLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.0.clone(),
        }
    }
}

/// A service that records the method and answer of every request it passes on.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B> tower::Service<http::Request<Body>> for Counted<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<B>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let method = request.method().to_string();
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "<error>".to_owned(),
            };
            metrics.kube_request(&method, &code);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer as _, Service as _};

    #[tokio::test]
    async fn every_answer_is_counted_by_method_and_code() {
        let metrics = Arc::new(Metrics::new());
        let apiserver = tower::service_fn(|request: http::Request<Body>| async move {
            let status = if request.uri().path().contains("secrets") {
                403
            } else {
                200
            };
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        });
        let mut service = CountLayer(metrics.clone()).layer(apiserver);
        for (method, path) in [
            ("GET", "/api/v1/pods"),
            ("GET", "/api/v1/namespaces/a/secrets"),
            ("POST", "/api/v1/namespaces/a/secrets"),
            ("GET", "/api/v1/pods"),
        ] {
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .body(Body::from(Vec::new()))
                .unwrap();
            service.call(request).await.unwrap();
        }
        let text = metrics.render(&crate::metrics::ScrapeState::default());
        for line in [
            "rest_client_requests_total{code=\"200\",method=\"GET\"} 2",
            "rest_client_requests_total{code=\"403\",method=\"GET\"} 1",
            "rest_client_requests_total{code=\"403\",method=\"POST\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
