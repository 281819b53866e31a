//! Images through the router: the listing, a resolve choosing a new thread's image, the 409 for
//! another one, the change for the next sandbox, and every bad name a 400 that creates nothing.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::tests::{put_json, Api};

fn api() -> Api {
    let api = Api::new();
    api.provider.register_image("python");
    api.provider.register_image("node-22");
    api
}

#[tokio::test]
async fn get_images_lists_the_providers_host_first() {
    let api = api();
    let reply = api.call(Method::GET, "/v1/images").await;
    assert_eq!(reply.status, StatusCode::OK);
    let images = reply.json()["images"].clone();
    let names: Vec<&str> = images
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["host", "python", "node-22"]);
    assert_eq!(
        images[1],
        json!({
            "name": "python",
            "digest": "memory:python",
            "size_bytes": 0,
            "source": "memory image python",
            "setup": false,
        })
    );
    assert_eq!(images[0]["digest"], serde_json::Value::Null);
}

#[tokio::test]
async fn resolve_chooses_a_new_threads_image_and_refuses_another_later() {
    let api = api();
    let created = api
        .post_json(
            "/v1/threads/t1/resolve",
            json!({ "image": "python" }).to_string(),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());
    let sandbox = created.json()["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(api.provider.image_of(&sandbox).unwrap().as_str(), "python");

    // The same image, or none: the thread as it is; with a network profile too.
    for same in [
        json!({ "image": "python" }),
        json!({ "image": null }),
        json!({ "image": "python", "network": "restricted" }),
    ] {
        let again = api
            .post_json("/v1/threads/t1/resolve", same.to_string())
            .await;
        assert_eq!(again.status, StatusCode::OK, "{same}: {}", again.json());
    }
    let other = api
        .post_json(
            "/v1/threads/t1/resolve",
            json!({ "image": "node-22" }).to_string(),
        )
        .await;
    other.expect_error(StatusCode::CONFLICT, "image_conflict");
    let message = other.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("PUT /v1/threads/t1/image"), "{message}");

    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    assert_eq!(shown["session"]["image"], "python");
    api.resolve("t2").await;
    let shown = api.call(Method::GET, "/v1/threads/t2").await.json();
    assert_eq!(shown["session"]["image"], "host");
    let listed = api.call(Method::GET, "/v1/threads").await.json();
    assert_eq!(listed["threads"][0]["image"], "python", "{listed}");
    assert_eq!(api.provider.creates(), 2);
}

#[tokio::test]
async fn bad_image_names_are_400s_that_create_nothing() {
    let api = api();
    let cases = [
        (
            json!({ "image": "ruby" }),
            "unknown_image",
            "this deployment has: host, python, node-22",
        ),
        (
            json!({ "image": "Python" }),
            "invalid_image",
            "is not an image name",
        ),
        (
            json!({ "image": "../etc" }),
            "invalid_image",
            "is not an image name",
        ),
        (json!({ "image": 7 }), "invalid_image", "GET /v1/images"),
        (
            json!({ "image": "python", "size": 1 }),
            "invalid_json",
            "unknown field",
        ),
    ];
    for (body, code, says) in &cases {
        let reply = api
            .post_json("/v1/threads/t1/resolve", body.to_string())
            .await;
        reply.expect_error(StatusCode::BAD_REQUEST, code);
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains(says), "{body}: {message}");
    }
    assert_eq!(api.provider.creates(), 0);
    api.call(Method::GET, "/v1/threads/t1")
        .await
        .expect_error(StatusCode::NOT_FOUND, "unknown_thread");

    api.resolve("t1").await;
    for (body, code, _) in &cases[..4] {
        put_json(&api, "/v1/threads/t1/image", body.clone())
            .await
            .expect_error(StatusCode::BAD_REQUEST, code);
    }
    put_json(&api, "/v1/threads/t1/image", json!({}))
        .await
        .expect_error(StatusCode::BAD_REQUEST, "invalid_json");
    let shown = api.call(Method::GET, "/v1/threads/t1").await.json();
    assert_eq!(shown["session"]["image"], "host");
}

#[tokio::test]
async fn put_image_records_the_change_for_the_next_sandbox() {
    let api = api();
    put_json(&api, "/v1/threads/t1/image", json!({ "image": "python" }))
        .await
        .expect_error(StatusCode::NOT_FOUND, "unknown_thread");

    let sandbox = api.resolve("t1").await["sandbox_id"].clone();
    let reply = put_json(&api, "/v1/threads/t1/image", json!({ "image": "python" })).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    let body = reply.json();
    assert_eq!(body["applied"], "next_sandbox", "{body}");
    assert_eq!(body["session"]["image"], "python");
    assert_eq!(
        body["session"]["sandbox_id"], sandbox,
        "the sandbox is kept"
    );
    assert!(
        body["message"].as_str().unwrap().contains("reset"),
        "{body}"
    );
    assert_eq!(
        api.provider
            .image_of(sandbox.as_str().unwrap())
            .unwrap()
            .as_str(),
        "host"
    );

    let events = api.call(Method::GET, "/v1/threads/t1/events").await.json();
    let last = events["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["cause"], "user");
    assert_eq!(
        (last["from"].clone(), last["to"].clone()),
        (json!("active"), json!("active"))
    );
    assert_eq!(last["detail"], "image: python (from host)");

    let same = put_json(&api, "/v1/threads/t1/image", json!({ "image": "python" })).await;
    assert_eq!(same.json()["applied"], "unchanged");

    let reset = api.call(Method::POST, "/v1/threads/t1/reset").await;
    assert_eq!(reset.status, StatusCode::OK, "{}", reset.json());
    let fresh = reset.json()["sandbox_id"].as_str().unwrap().to_owned();
    assert_eq!(api.provider.image_of(&fresh).unwrap().as_str(), "python");
    // Now the thread's image: a resolve naming it is fine.
    let again = api
        .post_json(
            "/v1/threads/t1/resolve",
            json!({ "image": "python" }).to_string(),
        )
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        api.tb
            .load(&"t1".parse().unwrap())
            .await
            .unwrap()
            .image
            .as_str(),
        "python"
    );
}
