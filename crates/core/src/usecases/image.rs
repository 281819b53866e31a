//! A thread's image: chosen when the thread is created (a resolve's `image`, else the operator's
//! default for its scope), changed by a person (`PUT /v1/threads/{id}/image`) with a `user`
//! event. A sandbox's root cannot change under it: the change applies to the thread's next
//! sandbox (a reset, or a recreate), never to the one it has.

use serde::{Deserialize, Serialize};

use crate::domain::{unknown_image, ImageInfo, ImageName, Session, ThreadId};

use super::error::UseCaseError;
use super::settle::Settling;
use super::threadbox::{Step, Threadbox};

/// Where a changed image took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageApplied {
    /// The image was already the thread's: nothing was written.
    Unchanged,
    /// Recorded; the thread's next sandbox (a reset, or a recreate) starts from it. The
    /// current sandbox, if any, keeps the image it was made from.
    NextSandbox,
}

/// The outcome of a change: the record as stored and where the image applies.
#[derive(Clone, Debug)]
pub struct ImageChange {
    pub session: Session,
    pub applied: ImageApplied,
}

impl Threadbox {
    /// The images this deployment's provider can start a sandbox from.
    pub fn images(&self) -> Vec<ImageInfo> {
        self.provider.images()
    }

    /// `UnknownImage` (naming the registered ones) unless the provider has `image`.
    pub fn check_image(&self, image: &ImageName) -> Result<(), UseCaseError> {
        let registered = self.provider.images();
        if registered.iter().any(|info| &info.name == image) {
            Ok(())
        } else {
            Err(UseCaseError::UnknownImage(unknown_image(
                image.as_str(),
                &registered,
            )))
        }
    }

    /// Set the thread's image: one conditional write of the record with a `user` event (`from`
    /// = `to` = the current state, detail `image: NAME (from OLD)`). Its sandbox is left as it
    /// is; the next one starts from `image`.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id, image = %image))]
    pub async fn set_image(
        &self,
        thread_id: &ThreadId,
        image: ImageName,
    ) -> Result<ImageChange, UseCaseError> {
        self.check_image(&image)?;
        let mut settling = Settling::start(&self.config);
        loop {
            let current = self.load(thread_id).await?;
            if current.status.is_transitional() {
                // A worker holds a lease and writes conditionally on the version it read (a
                // create in flight reads the image it started with): wait for it.
                settling.wait(&self.config, &current).await?;
                continue;
            }
            let mut next = current.clone();
            let Some(event) = next.set_image(image.clone(), self.change(None)) else {
                return Ok(ImageChange {
                    session: current,
                    applied: ImageApplied::Unchanged,
                });
            };
            if let Step::Moved(session) = self.write(next, current.version, vec![event]).await? {
                return Ok(ImageChange {
                    session,
                    applied: ImageApplied::NextSandbox,
                });
            }
        }
    }
}
