//! The background process routes, `/v1/threads/{id}/processes[/{pid}[/output|/input]]`: start,
//! list, read output (or follow it as server-sent events), write input, signal (the server's side
//! is `crates/api/src/http/processes.rs`).

use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use threadbox_api::wire::{self, EndFrame, OutputPage, Payload, PayloadError, ProcessBody};
use threadbox_core::ports::{ProcessInfo, ProcessOutput, ProcessSignal};

use super::events::{output_bytes, parse, EventStream, Events};
use super::{Client, ClientError, REQUEST_TIMEOUT};

#[derive(Deserialize)]
struct Listing {
    processes: Vec<ProcessInfo>,
}

/// What a followed process's output hands over, in order: output, then the end.
#[derive(Debug)]
pub enum FollowUpdate {
    Output(Vec<u8>),
    /// The follow is over: the offset to read on from, and the process as it stands (`None`
    /// when the server could not tell). A process still running means the server's follow
    /// timed out, not that the process ended.
    End {
        next: u64,
        process: Option<ProcessInfo>,
    },
}

/// A followed process's events: `output`, then `end`.
pub struct FollowEvents;

impl Events for FollowEvents {
    type Update = FollowUpdate;
    const END: &'static str = "its end event";

    fn update(name: &str, data: &str) -> Result<Option<FollowUpdate>, String> {
        Ok(Some(match name {
            wire::OUTPUT => FollowUpdate::Output(output_bytes(name, data)?),
            wire::END => {
                let end: EndFrame = parse(name, data)?;
                FollowUpdate::End {
                    next: end.next,
                    process: end.process,
                }
            }
            _ => return Ok(None),
        }))
    }
}

/// A process's output as the server sends it; read it with [`EventStream::next`].
pub type ProcessFollow = EventStream<FollowEvents>;

/// A page's bytes: `text` or `base64`, or none (an empty page).
fn page_bytes(data: Payload) -> Result<Vec<u8>, String> {
    match data.decode() {
        Ok(bytes) => Ok(bytes),
        Err(PayloadError::Neither) => Ok(Vec::new()),
        Err(PayloadError::Base64(e)) => Err(format!("output with bad base64 ({e})")),
        Err(PayloadError::Both) => Err("output with both text and base64".into()),
    }
}

impl Client {
    /// `…/processes[/{pid}[/{tail}]]`, each part its own encoded segment.
    fn process_url(&self, thread_id: &str, process_id: Option<&str>, tail: Option<&str>) -> Url {
        let mut url = self.url(Some(thread_id), Some("processes"));
        url.path_segments_mut()
            .expect("an http(s) base URL")
            .extend(process_id)
            .extend(tail);
        url
    }

    /// Send a request with an optional JSON body; the success's body, or the error it means.
    async fn send_json<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<(Vec<u8>, String), ClientError> {
        let shown = url.to_string();
        let mut request = self.request(method, url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let bytes = Self::answer(request, &shown).await?;
        Ok((bytes, shown))
    }

    fn decode<T: DeserializeOwned>(bytes: &[u8], shown: String) -> Result<T, ClientError> {
        serde_json::from_slice(bytes).map_err(|e| ClientError::Protocol {
            url: shown,
            detail: format!("a body that is not threadbox's JSON ({e})"),
        })
    }

    /// Start a background process (the sandbox is created or resumed first).
    pub async fn start_process(
        &self,
        thread_id: &str,
        spec: &ProcessBody,
    ) -> Result<ProcessInfo, ClientError> {
        let url = self.process_url(thread_id, None, None);
        let (bytes, shown) = self.send_json(Method::POST, url, Some(spec)).await?;
        Self::decode(&bytes, shown)
    }

    /// The thread's processes, running and ended, oldest first.
    pub async fn list_processes(&self, thread_id: &str) -> Result<Vec<ProcessInfo>, ClientError> {
        let url = self.process_url(thread_id, None, None);
        let (bytes, shown) = self.send_json::<()>(Method::GET, url, None).await?;
        Self::decode::<Listing>(&bytes, shown).map(|l| l.processes)
    }

    /// Up to `max` bytes of a process's output from offset `after` (the server's most when
    /// `None`).
    pub async fn process_output(
        &self,
        thread_id: &str,
        process_id: &str,
        after: u64,
        max: Option<u64>,
    ) -> Result<ProcessOutput, ClientError> {
        let mut url = self.process_url(thread_id, Some(process_id), Some("output"));
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("after", &after.to_string());
            if let Some(max) = max {
                query.append_pair("max", &max.to_string());
            }
        }
        let (bytes, shown) = self.send_json::<()>(Method::GET, url, None).await?;
        let page: OutputPage = Self::decode(&bytes, shown.clone())?;
        let data =
            page_bytes(page.data).map_err(|detail| ClientError::Protocol { url: shown, detail })?;
        Ok(ProcessOutput {
            offset: page.offset,
            data,
            stderr: page.stderr.iter().map(|[from, to]| *from..*to).collect(),
            info: page.process,
        })
    }

    /// Write to a process's standard input: text as `text`, other bytes as `base64`.
    pub async fn write_process_input(
        &self,
        thread_id: &str,
        process_id: &str,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let body = Payload::of(data);
        let url = self.process_url(thread_id, Some(process_id), Some("input"));
        self.send_json(Method::POST, url, Some(&body))
            .await
            .map(drop)
    }

    /// Send a signal to a process's group; an ended process ignores it.
    pub async fn signal_process(
        &self,
        thread_id: &str,
        process_id: &str,
        signal: ProcessSignal,
    ) -> Result<(), ClientError> {
        let mut url = self.process_url(thread_id, Some(process_id), None);
        url.query_pairs_mut().append_pair("signal", signal.name());
        self.send_json::<()>(Method::DELETE, url, None)
            .await
            .map(drop)
    }

    /// Follow a process's output from `after` as it comes; read it with
    /// [`EventStream::next`]. The server ends a follow when the process ends, or after its
    /// longest follow (`MAX_FOLLOW`); dropping the follow stops it (not the process).
    pub async fn follow_process_output(
        &self,
        thread_id: &str,
        process_id: &str,
        after: u64,
    ) -> Result<ProcessFollow, ClientError> {
        let mut url = self.process_url(thread_id, Some(process_id), Some("output"));
        url.query_pairs_mut()
            .append_pair("after", &after.to_string());
        let (response, shown) = self
            .open_stream(Method::GET, url, |request| {
                request.timeout(threadbox_api::http::MAX_FOLLOW + REQUEST_TIMEOUT)
            })
            .await?;
        Ok(EventStream::new(response, shown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use threadbox_core::ports::PtySize;

    #[test]
    fn process_urls_encode_each_part() {
        let client = Client::new("https://api.example.com/prod", None).unwrap();
        assert_eq!(
            client
                .process_url("t1", Some("abc123"), Some("output"))
                .as_str(),
            "https://api.example.com/prod/v1/threads/t1/processes/abc123/output"
        );
        assert_eq!(
            client.process_url("t1", Some("a/b"), None).as_str(),
            "https://api.example.com/prod/v1/threads/t1/processes/a%2Fb"
        );
    }

    #[test]
    fn specs_and_signals_are_the_apis_shapes() {
        let spec = ProcessBody {
            argv: Some(vec!["sleep".into(), "9".into()]),
            pty: Some(PtySize { cols: 80, rows: 24 }),
            idle_timeout_ms: Some(60_000),
            ..ProcessBody::default()
        };
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"argv": ["sleep", "9"], "pty": {"cols": 80, "rows": 24}, "idle_timeout_ms": 60000})
        );
        assert_eq!(ProcessSignal::Term.name(), "TERM");
        assert_eq!(ProcessSignal::Kill.name(), "KILL");
        let bytes_of = |text: Option<&str>, base64: Option<&str>| {
            page_bytes(Payload {
                text: text.map(str::to_owned),
                base64: base64.map(str::to_owned),
            })
        };
        assert_eq!(bytes_of(None, Some("/w==")).unwrap(), vec![0xff]);
        assert_eq!(bytes_of(Some("hi"), None).unwrap(), b"hi");
        assert!(bytes_of(Some("a"), Some("YQ==")).is_err());
    }
}
