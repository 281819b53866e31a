//! `threadbox dlq list|redrive`, the real binary against moto's SQS (skipped without
//! `AWS_ENDPOINT_URL`, a failure under `THREADBOX_REQUIRE_AWS=1`, like the other AWS tests).

use std::process::{Command, Output};

use threadbox_aws::sqs::SqsQueue;
use threadbox_core::ports::{DurableQueue, OutgoingMessage};
use threadbox_tests::aws::{aws_configured, fresh_queue, sdk_config};

fn threadbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_threadbox"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run threadbox")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "threadbox failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn dead_letter(group: &str, dedup: &str, body: &str) -> OutgoingMessage {
    OutgoingMessage {
        group_id: group.into(),
        dedup_id: dedup.into(),
        body: body.into(),
    }
}

/// Dead letters are listed without being taken, then redriven to their queue in order within
/// their thread, leaving the dead-letter queue empty; a second redrive moves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_are_listed_and_redriven_in_order() {
    if !aws_configured("dead_letters_are_listed_and_redriven_in_order") {
        return;
    }
    let sdk = sdk_config().await;
    let queue: SqsQueue = fresh_queue(&sdk, 5).await;
    let urls = queue.urls().clone();
    for (dedup, body) in [("e-1", "first"), ("e-2", "second")] {
        queue
            .send_to_dead_letter(&dead_letter("thread-a", dedup, body))
            .await
            .unwrap();
    }
    queue
        .send_to_dead_letter(&dead_letter("thread-b", "e-3", "other"))
        .await
        .unwrap();

    let listed = stdout(&threadbox(&[
        "dlq",
        "list",
        "--dlq-url",
        &urls.dead_letter_url,
        "--json",
    ]));
    let lines: Vec<serde_json::Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bodies: Vec<&str> = lines.iter().map(|l| l["body"].as_str().unwrap()).collect();
    assert_eq!(bodies, ["first", "second", "other"], "{listed}");
    assert_eq!(lines[0]["thread_id"], "thread-a");
    // Listing took nothing: the table shows the same three.
    let table = stdout(&threadbox(&[
        "dlq",
        "list",
        "--dlq-url",
        &urls.dead_letter_url,
    ]));
    assert_eq!(
        table.lines().count(),
        4,
        "a header and three rows:\n{table}"
    );

    let redrive = || {
        let (dlq, queue) = (&urls.dead_letter_url, &urls.queue_url);
        stdout(&threadbox(&[
            "dlq",
            "redrive",
            "--dlq-url",
            dlq,
            "--queue-url",
            queue,
        ]))
    };
    let redriven = redrive();
    assert!(redriven.starts_with("moved 3 message(s)"), "{redriven}");
    assert!(queue.dead_letters(10).await.unwrap().is_empty());

    let mut back = Vec::new();
    for _ in 0..10 {
        let received = queue
            .receive(10, std::time::Duration::from_secs(30))
            .await
            .unwrap();
        for message in received {
            back.push((message.group_id.clone(), message.body.clone()));
            queue.ack(&message.receipt).await.unwrap();
        }
        if back.len() == 3 {
            break;
        }
    }
    let in_a: Vec<&str> = back
        .iter()
        .filter(|(g, _)| g == "thread-a")
        .map(|(_, b)| b.as_str())
        .collect();
    assert_eq!(
        in_a,
        ["first", "second"],
        "in order within the thread: {back:?}"
    );
    assert_eq!(back.len(), 3, "{back:?}");

    let again = redrive();
    assert!(again.starts_with("moved 0 message(s)"), "{again}");
}

/// A wrong URL is an error naming it, with a non-zero exit.
#[test]
fn a_missing_queue_url_is_a_usage_error() {
    let output = threadbox(&["dlq", "redrive", "--dlq-url", "http://127.0.0.1:9/q.fifo"]);
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--queue-url"));
}
