//! `threadbox images`: the images the deployment's sandboxes can start from (`GET /v1/images`),
//! as a table for people or `--json` for scripts. Over the HTTP API like `threads`, so it works
//! the same against `threadbox dev` and a deployed stack.

use std::process::ExitCode;

use bytesize::ByteSize;
use threadbox_core::domain::ImageInfo;

use crate::client::ApiArgs;
use crate::threads::output::Output;
use crate::threads::table::{Cell, Table};

#[derive(clap::Args, Debug)]
pub struct ImagesArgs {
    #[command(flatten)]
    api: ApiArgs,

    /// Print the API's JSON (`{"images": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: ImagesArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let out = Output::new(args.json);
    let list = client.images().await?;
    if out.json {
        out.document(&list)?;
    } else {
        out.text(&table(&list.images))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One row per image: its name, digest (shortened as `docker images` does), unpacked size,
/// whether it has a set-up step, and where it came from.
pub fn table(images: &[ImageInfo]) -> String {
    let mut table = Table::new(&["NAME", "DIGEST", "SIZE", "SETUP", "SOURCE"]);
    for image in images {
        table.row(vec![
            Cell::from(image.name.as_str()),
            Cell::from(image.digest.as_deref().map_or("-".to_owned(), short_digest)),
            Cell::from(
                image
                    .size_bytes
                    .map_or("-".to_owned(), |b| ByteSize(b).to_string()),
            ),
            Cell::from(if image.setup { "yes" } else { "-" }),
            Cell::from(image.source.as_str()),
        ]);
    }
    table.render(false)
}

/// `sha256:` and the first 12 hex digits; anything else (an E2B template id) as it is.
fn short_digest(digest: &str) -> String {
    match digest.strip_prefix("sha256:") {
        Some(hex) if hex.len() > 12 => format!("sha256:{}", &hex[..12]),
        _ => digest.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadbox_core::domain::ImageName;

    #[test]
    fn the_table_shows_each_image_with_a_short_digest() {
        let images = vec![
            ImageInfo::host("runc: the host's /usr"),
            ImageInfo {
                name: ImageName::parse("python").unwrap(),
                digest: Some(format!("sha256:{}", "ab12".repeat(16))),
                size_bytes: Some(150 * 1024 * 1024),
                source: "/srv/images/python.tar".into(),
                setup: true,
            },
            ImageInfo {
                name: ImageName::parse("node").unwrap(),
                digest: Some("tpl-node-22".into()),
                size_bytes: None,
                source: "e2b template tpl-node-22".into(),
                setup: false,
            },
        ];
        let text = table(&images);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert!(lines[1].starts_with("host "), "{text}");
        assert!(lines[1].contains("runc: the host's /usr"), "{text}");
        assert!(lines[2].contains("sha256:ab12ab12ab12 "), "{text}");
        assert!(lines[2].contains("150.0 MiB"), "{text}");
        assert!(lines[2].contains(" yes "), "{text}");
        assert!(lines[3].contains("tpl-node-22"), "{text}");
    }
}
