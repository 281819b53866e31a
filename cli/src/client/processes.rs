//! The background process routes, `/v1/threads/{id}/processes[/{pid}[/output|/input]]`: start,
//! list, read output (or follow it as server-sent events), write input, signal (the server's side
//! is `crates/api/src/http/processes.rs`).

use std::collections::{BTreeMap, VecDeque};

use base64::Engine as _;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use threadbox_core::ports::{ProcessInfo, ProcessOutput, ProcessSignal, PtySize};

use super::exec_stream::{EventReader, SseEvent};
use super::{Client, ClientError, REQUEST_TIMEOUT};

/// The body of `POST /v1/threads/{id}/processes`: exactly one of `cmd` (a shell line) or `argv`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmd: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Run on a terminal of this size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
struct Listing {
    processes: Vec<ProcessInfo>,
}

/// `GET …/output`: where the bytes start, the bytes (`text` or `base64`), the process.
#[derive(Deserialize)]
struct OutputPage {
    offset: u64,
    text: Option<String>,
    base64: Option<String>,
    process: ProcessInfo,
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

/// A process's output as the server sends it.
pub struct ProcessFollow {
    response: reqwest::Response,
    url: String,
    reader: EventReader,
    queued: VecDeque<SseEvent>,
}

/// `{"text": ...}` or `{"base64": ...}` as bytes.
fn bytes_of(text: Option<String>, encoded: Option<String>) -> Result<Vec<u8>, String> {
    match (text, encoded) {
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| format!("output with bad base64 ({e})")),
        (None, None) => Ok(Vec::new()),
        (Some(_), Some(_)) => Err("output with both text and base64".into()),
    }
}

/// A signal by the name the API takes (`TERM`, `KILL`, ...).
pub fn signal_name(signal: ProcessSignal) -> String {
    serde_json::to_value(signal)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
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
        spec: &ProcessSpec,
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
        let data = bytes_of(page.text, page.base64)
            .map_err(|detail| ClientError::Protocol { url: shown, detail })?;
        Ok(ProcessOutput {
            offset: page.offset,
            data,
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
        let body = match std::str::from_utf8(data) {
            Ok(text) => json!({ "text": text }),
            Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(data) }),
        };
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
        url.query_pairs_mut()
            .append_pair("signal", &signal_name(signal));
        self.send_json::<()>(Method::DELETE, url, None)
            .await
            .map(drop)
    }

    /// Follow a process's output from `after` as it comes; read it with
    /// [`ProcessFollow::next`]. The server ends a follow when the process ends, or after its
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
        Ok(ProcessFollow {
            response,
            url: shown,
            reader: EventReader::default(),
            queued: VecDeque::new(),
        })
    }
}

impl ProcessFollow {
    /// The next piece of output, or the follow's end. An `error` event is the API's error.
    pub async fn next(&mut self) -> Result<FollowUpdate, ClientError> {
        loop {
            while let Some(event) = self.queued.pop_front() {
                if let Some(update) = self.update(event)? {
                    return Ok(update);
                }
            }
            let chunk = self
                .response
                .chunk()
                .await
                .map_err(|e| ClientError::unreachable(&self.url, &e))?;
            match chunk {
                Some(chunk) => self.queued.extend(self.reader.push(&chunk)),
                None => {
                    return Err(self.protocol(
                        "the stream ended before its end event (the connection was cut?)".into(),
                    ))
                }
            }
        }
    }

    fn update(&self, event: SseEvent) -> Result<Option<FollowUpdate>, ClientError> {
        #[derive(Deserialize)]
        struct Output {
            text: Option<String>,
            base64: Option<String>,
        }
        #[derive(Deserialize)]
        struct End {
            next: u64,
            process: Option<ProcessInfo>,
        }
        #[derive(Deserialize)]
        struct StreamError {
            status: u16,
            code: String,
            message: String,
            retry_after: Option<u64>,
        }
        Ok(Some(match event.name.as_str() {
            "output" => {
                let output: Output = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("a bad output event ({e})")))?;
                let bytes = bytes_of(output.text, output.base64).map_err(|e| self.protocol(e))?;
                FollowUpdate::Output(bytes)
            }
            "end" => {
                let end: End = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("a bad end event ({e})")))?;
                FollowUpdate::End {
                    next: end.next,
                    process: end.process,
                }
            }
            "error" => {
                let error: StreamError = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("a bad error event ({e})")))?;
                return Err(ClientError::Api {
                    status: error.status,
                    code: error.code,
                    message: error.message,
                    retry_after: error.retry_after,
                });
            }
            // Events a newer server adds are not this client's to act on.
            _ => return Ok(None),
        }))
    }

    fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            url: self.url.clone(),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let spec = ProcessSpec {
            argv: Some(vec!["sleep".into(), "9".into()]),
            pty: Some(PtySize { cols: 80, rows: 24 }),
            idle_timeout_ms: Some(60_000),
            ..ProcessSpec::default()
        };
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            json!({"argv": ["sleep", "9"], "pty": {"cols": 80, "rows": 24}, "idle_timeout_ms": 60000})
        );
        assert_eq!(signal_name(ProcessSignal::Term), "TERM");
        assert_eq!(signal_name(ProcessSignal::Kill), "KILL");
        assert_eq!(bytes_of(None, Some("/w==".into())).unwrap(), vec![0xff]);
        assert_eq!(bytes_of(Some("hi".into()), None).unwrap(), b"hi");
        assert!(bytes_of(Some("a".into()), Some("YQ==".into())).is_err());
    }
}
