//! A function's clients, rebuilt when its secrets change (see `secrets`): each invocation first
//! asks whether the secrets are due for a fetch, and when a fetch brings a changed value, the
//! clients are built again from the new values before the invocation uses them. Invocations
//! already running keep the clients they started with.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use super::env::{Env, SetupError};
use super::secrets::SecretSet;

type Build<T> =
    Box<dyn Fn(Env) -> Pin<Box<dyn Future<Output = Result<T, SetupError>> + Send>> + Send + Sync>;

/// `T` (a handler, a router) built from the environment with the secrets over it.
pub struct Rebuilt<T> {
    secrets: Arc<SecretSet>,
    base: Box<dyn Fn() -> Env + Send + Sync>,
    build: Build<T>,
    current: RwLock<Arc<T>>,
}

impl<T: Send + Sync + 'static> Rebuilt<T> {
    /// Build once now from the process environment (a failure stops the function at start-up).
    pub async fn new<F, Fut>(secrets: Arc<SecretSet>, build: F) -> Result<Arc<Self>, SetupError>
    where
        F: Fn(Env) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, SetupError>> + Send + 'static,
    {
        Self::with_base(secrets, Env::process, build).await
    }

    /// [`Self::new`] over another base environment (tests).
    pub async fn with_base<B, F, Fut>(
        secrets: Arc<SecretSet>,
        base: B,
        build: F,
    ) -> Result<Arc<Self>, SetupError>
    where
        B: Fn() -> Env + Send + Sync + 'static,
        F: Fn(Env) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, SetupError>> + Send + 'static,
    {
        let build: Build<T> = Box::new(move |env| Box::pin(build(env)));
        let first = build(secrets.env_over(base())).await?;
        Ok(Arc::new(Self {
            secrets,
            base: Box::new(base),
            build,
            current: RwLock::new(Arc::new(first)),
        }))
    }

    /// The secrets behind it (to mark them stale after an authentication failure).
    pub fn secrets(&self) -> &Arc<SecretSet> {
        &self.secrets
    }

    /// The current `T`, after refreshing the secrets when they are due. A failed fetch or
    /// rebuild keeps the old one (logged; tried again at the next due time).
    pub async fn current(&self) -> Arc<T> {
        if self.secrets.due() {
            match self.secrets.refresh().await {
                Ok(true) => match (self.build)(self.secrets.env_over((self.base)())).await {
                    Ok(fresh) => *self.current.write().unwrap() = Arc::new(fresh),
                    Err(error) => {
                        tracing::error!(%error, "rebuilding with the changed secrets failed")
                    }
                },
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "fetching the secrets again failed"),
            }
        }
        self.current.read().unwrap().clone()
    }
}
