//! Clients that live entirely on the `TestEnv`'s own runtime.
//!
//! `kube`'s client hands each request future back to the caller, and hyper
//! spawns connection tasks on whatever runtime polls it. A connection born on a
//! test's runtime then stalls, for every user of the shared client, while that
//! test's thread blocks (a synchronous call into the launcher, say) or after the
//! test's runtime ends. This layer runs every request on the env runtime instead.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{BoxError, Layer, Service};

/// Spawns every request of the wrapped service onto one runtime.
#[derive(Clone)]
pub struct OnRuntimeLayer(pub tokio::runtime::Handle);

impl<S> Layer<S> for OnRuntimeLayer {
    type Service = OnRuntime<S>;
    fn layer(&self, inner: S) -> OnRuntime<S> {
        OnRuntime {
            inner,
            handle: self.0.clone(),
        }
    }
}

/// See [`OnRuntimeLayer`].
pub struct OnRuntime<S> {
    inner: S,
    handle: tokio::runtime::Handle,
}

impl<S, Req> Service<Req> for OnRuntime<S>
where
    S: Service<Req>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let task = self.handle.spawn(self.inner.call(req));
        Box::pin(async move {
            match task.await {
                Ok(r) => r.map_err(Into::into),
                Err(join) => Err(Box::new(join) as BoxError),
            }
        })
    }
}
