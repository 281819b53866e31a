//! The usecases `race` module's tests that need a real store (SQLite) and the test support
//! crate, which depend on the core and so cannot be its unit tests.

use std::time::Duration;

use threadbox_core::domain::*;
use threadbox_core::ports::ExecRequest;
use threadbox_core::usecases::Config;
use threadbox_core::usecases::*;

mod support;
use support::{world_with, World};

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

#[tokio::test]
async fn a_command_that_loses_its_sandbox_to_a_reset_is_interrupted_not_run_again() {
    let World { tb, provider, .. } = &world_with(Config {
        settle_poll: Duration::from_millis(5),
        ..Config::default()
    });
    let first = tb.resolve(&tid("t1")).await.unwrap().sandbox_id;
    provider.set_exec_delay(Duration::from_millis(500));
    let exec = {
        let tb = tb.clone();
        tokio::spawn(async move { tb.exec(&tid("t1"), ExecRequest::shell("work")).await })
    };
    while provider.commands().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fresh = tb.reset(&tid("t1")).await.unwrap().sandbox_id;
    assert_ne!(fresh, first);

    let err = exec.await.unwrap().unwrap_err();
    assert!(
        matches!(
            &err,
            UseCaseError::Interrupted {
                what: "reset or destroyed",
                status: Status::Active,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "interrupted");
    assert!(err.is_retryable());
    assert!(err.to_string().contains("try again"), "{err}");
    assert_eq!(
        provider.commands(),
        ["work"],
        "the command is not run again in the reset thread's new sandbox"
    );
}
