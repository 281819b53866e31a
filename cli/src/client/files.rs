//! The file routes, `/v1/threads/{id}/files/{path}`: read, write, list, stat and remove.

use reqwest::Method;
use serde::Deserialize;
use threadbox_core::ports::{FileEntry, GrepMatch};

use super::{Client, ClientError};

#[derive(Deserialize)]
struct Listing {
    entries: Vec<FileEntry>,
}

#[derive(Deserialize)]
struct Written {
    size: u64,
}

#[derive(Deserialize)]
struct Globbed {
    paths: Vec<String>,
}

#[derive(Deserialize)]
struct Grepped {
    matches: Vec<GrepMatch>,
}

impl Client {
    /// `…/files/<path>`, each part of the sandbox path its own encoded segment.
    fn file_url(&self, thread_id: &str, path: &str) -> reqwest::Url {
        let mut url = self.url(Some(thread_id), Some("files"));
        url.path_segments_mut()
            .expect("an http(s) base URL")
            .extend(path.split('/').filter(|part| !part.is_empty()));
        url
    }

    /// A file's bytes if it holds at most `limit` of them, else `None`: reading stops one byte
    /// past the limit, so a huge file costs no more memory than a small one. Reading does not
    /// wake a paused sandbox (the API's GETs change nothing).
    pub async fn read_file(
        &self,
        thread_id: &str,
        path: &str,
        limit: usize,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        let url = self.file_url(thread_id, path);
        let shown = url.to_string();
        let mut response = self
            .request(Method::GET, url)
            .send()
            .await
            .map_err(|e| ClientError::unreachable(&shown, &e))?;
        let status = response.status();
        if !status.is_success() {
            let body = response
                .bytes()
                .await
                .map_err(|e| ClientError::unreachable(&shown, &e))?;
            return Err(ClientError::from_response(status.as_u16(), None, &body));
        }
        let mut contents = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| ClientError::unreachable(&shown, &e))?
        {
            contents.extend_from_slice(&chunk);
            if contents.len() > limit {
                return Ok(None);
            }
        }
        Ok(Some(contents))
    }

    /// Replace (or create) a file, parents included; the bytes written.
    pub async fn write_file(
        &self,
        thread_id: &str,
        path: &str,
        contents: Vec<u8>,
    ) -> Result<u64, ClientError> {
        let url = self.file_url(thread_id, path);
        let shown = url.to_string();
        let body = Self::answer(self.request(Method::PUT, url).body(contents), &shown).await?;
        let written: Written =
            serde_json::from_slice(&body).map_err(|e| ClientError::Protocol {
                url: shown,
                detail: format!("an upload answer that is not threadbox's JSON ({e})"),
            })?;
        Ok(written.size)
    }

    pub async fn list_dir(
        &self,
        thread_id: &str,
        path: &str,
    ) -> Result<Vec<FileEntry>, ClientError> {
        let mut url = self.file_url(thread_id, path);
        url.set_query(Some("list=true"));
        let listing: Listing = self.call(Method::GET, url, None, None).await?;
        Ok(listing.entries)
    }

    pub async fn stat(&self, thread_id: &str, path: &str) -> Result<FileEntry, ClientError> {
        let mut url = self.file_url(thread_id, path);
        url.set_query(Some("stat=true"));
        self.call(Method::GET, url, None, None).await
    }

    /// Remove a file, or a directory (with everything in it when `recursive`).
    pub async fn remove(
        &self,
        thread_id: &str,
        path: &str,
        recursive: bool,
    ) -> Result<(), ClientError> {
        let mut url = self.file_url(thread_id, path);
        if recursive {
            url.set_query(Some("recursive=true"));
        }
        let shown = url.to_string();
        Self::answer(self.request(Method::DELETE, url), &shown)
            .await
            .map(drop)
    }

    /// Make a directory and its missing parents.
    pub async fn make_dir(&self, thread_id: &str, path: &str) -> Result<(), ClientError> {
        let mut url = self.file_url(thread_id, path);
        url.set_query(Some("dir=true"));
        let shown = url.to_string();
        Self::answer(self.request(Method::PUT, url), &shown)
            .await
            .map(drop)
    }

    /// Paths under `path` matching `glob` (relative to it; `**` for any depth).
    pub async fn glob(
        &self,
        thread_id: &str,
        path: &str,
        glob: &str,
    ) -> Result<Vec<String>, ClientError> {
        let mut url = self.file_url(thread_id, path);
        url.query_pairs_mut().append_pair("glob", glob);
        let found: Globbed = self.call(Method::GET, url, None, None).await?;
        Ok(found.paths)
    }

    /// Lines under `path` matching the regular expression `pattern`.
    pub async fn grep(
        &self,
        thread_id: &str,
        path: &str,
        pattern: &str,
    ) -> Result<Vec<GrepMatch>, ClientError> {
        let mut url = self.file_url(thread_id, path);
        url.query_pairs_mut().append_pair("grep", pattern);
        let found: Grepped = self.call(Method::GET, url, None, None).await?;
        Ok(found.matches)
    }
}
