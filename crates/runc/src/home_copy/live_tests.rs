//! The two-pass copy against a tree changed between its passes: the result must be the tree as
//! it is at pass 2, whatever pass 1 saw, and what did not change must not be copied again.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use super::*;
use crate::idmap::IdRange;

fn caller() -> IdRange {
    IdRange::rootless(
        rustix::process::getuid().as_raw(),
        rustix::process::getgid().as_raw(),
    )
}

/// A two-pass copy of `src` into a fresh `dst` that trusts ctimes older than its start (no
/// margin: the test's files are made just before).
fn live(src: &Path, dst: &Path) -> LiveCopy {
    fs::create_dir(dst).unwrap();
    let mut copy = LiveCopy::new(
        src.to_owned(),
        dst.to_owned(),
        IdMove::same(caller()),
        1 << 30,
        None,
    );
    copy.margin = Some(Duration::ZERO);
    // This process (and its threads: the test's other copies) is the one writing.
    copy.watching(Box::new(|| Ok(vec![std::process::id() as i32])))
}

/// Every entry under `dir`: relative path, kind, mode, size, mtime, contents or link target.
fn snapshot(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            let what = if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_owned()
            } else if meta.file_type().is_symlink() {
                format!("-> {}", fs::read_link(&path).unwrap().display())
            } else {
                format!("{:?}", fs::read(&path).unwrap())
            };
            let mtime = if meta.is_dir() { 0 } else { meta.mtime() };
            out.push(format!(
                "{rel} {:o} {} {mtime} {what}",
                meta.mode() & 0o7777,
                if meta.is_dir() { 0 } else { meta.len() }
            ));
        }
    }
    out.sort();
    out
}

/// Let the coarse clock that stamps ctimes move past what was just written.
fn settle() {
    std::thread::sleep(Duration::from_millis(30));
}

#[test]
fn changes_between_the_passes_end_as_the_source_is_at_the_second() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    fs::create_dir_all(src.join("keep/deep")).unwrap();
    fs::create_dir_all(src.join("one")).unwrap();
    fs::create_dir_all(src.join("two")).unwrap();
    fs::create_dir_all(src.join("gone")).unwrap();
    fs::write(src.join("keep/deep/same"), b"untouched").unwrap();
    fs::write(src.join("one/f"), b"one").unwrap();
    fs::write(src.join("two/f"), b"two").unwrap();
    fs::write(src.join("gone/f"), b"x").unwrap();
    fs::write(src.join("sneaky"), b"AAAA").unwrap();
    fs::write(src.join("becomes-dir"), b"file").unwrap();
    fs::write(src.join("chmodded"), b"mode").unwrap();
    std::os::unix::fs::symlink("one", src.join("link")).unwrap();
    settle();

    let mut copy = live(&src, &dst);
    copy.warm();
    assert!(copy.warm.is_some(), "two passes on this filesystem");
    assert_eq!(fs::read(dst.join("keep/deep/same")).unwrap(), b"untouched");

    // Between the passes, the sandbox running: the same bytes count, the same mtime put back
    // (only the ctime tells); two folders swapped by renames (their files keep their ctimes);
    // a folder removed; new entries; a file become a folder; a mode changed; a link retargeted.
    let mtime = fs::metadata(src.join("sneaky"))
        .unwrap()
        .modified()
        .unwrap();
    fs::write(src.join("sneaky"), b"BBBB").unwrap();
    fs::File::options()
        .write(true)
        .open(src.join("sneaky"))
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    fs::rename(src.join("one"), src.join("tmp")).unwrap();
    fs::rename(src.join("two"), src.join("one")).unwrap();
    fs::rename(src.join("tmp"), src.join("two")).unwrap();
    fs::remove_dir_all(src.join("gone")).unwrap();
    fs::create_dir_all(src.join("new/sub")).unwrap();
    fs::write(src.join("new/sub/n"), b"new").unwrap();
    fs::remove_file(src.join("becomes-dir")).unwrap();
    fs::create_dir(src.join("becomes-dir")).unwrap();
    fs::set_permissions(src.join("chmodded"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::remove_file(src.join("link")).unwrap();
    std::os::unix::fs::symlink("two", src.join("link")).unwrap();

    let done = copy.finish().unwrap();
    assert!(done.two_pass);
    assert_eq!(
        snapshot(&src),
        snapshot(&dst),
        "the copy is the source at pass 2"
    );
    assert_eq!(fs::read(dst.join("sneaky")).unwrap(), b"BBBB");
    assert_eq!(fs::read(dst.join("one/f")).unwrap(), b"two");
    // sneaky, one/f, two/f, new/sub/n, chmodded, link: copied again; keep/deep/same not.
    assert_eq!(done.recopied, 6, "{done:?}");
    assert_eq!(done.stats.files, 14, "{done:?}");
}

#[test]
fn a_store_through_a_shared_mapping_is_copied_again() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    fs::create_dir(&src).unwrap();
    let path = src.join("mapped");
    fs::write(&path, vec![b'a'; 4096]).unwrap();
    let file = fs::File::options()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: a shared mapping of the 4096-byte file held above, written within its length
    // and unmapped before the test ends.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    // Only the mapping is left: no descriptor open for writing tells.
    drop(file);
    let page = at.cast::<u8>();
    // The first store faults the page writable (and moves the times); later ones do not.
    // SAFETY: within the mapping.
    unsafe { page.write_volatile(b'b') };
    settle();
    let ctime = fs::metadata(&path).unwrap().ctime_nsec();

    let mut copy = live(&src, &dst);
    copy.warm();
    // SAFETY: within the mapping.
    unsafe { page.add(1).write_volatile(b'c') };
    let done = copy.finish().unwrap();
    let copied = fs::read(dst.join("mapped")).unwrap();
    assert_eq!(
        &copied[..3],
        b"bca",
        "the store after pass 1 is in the copy"
    );
    if fs::metadata(&path).unwrap().ctime_nsec() == ctime {
        // The kernel did not write the page back meanwhile: only the mapping told.
        assert_eq!(done.recopied, 1);
    }
    // SAFETY: the mapping made above.
    assert_eq!(unsafe { libc::munmap(at, 4096) }, 0);
}

#[test]
fn pass_one_never_follows_a_link_swapped_for_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst, outside) = (
        dir.path().join("src"),
        dir.path().join("dst"),
        dir.path().join("outside"),
    );
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret"), b"host").unwrap();
    fs::create_dir_all(src.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, src.join("l")).unwrap();
    // As if `d` had been listed as a folder and swapped for a link before it was opened.
    let root = open_root(&src).unwrap();
    assert!(
        open_beneath(&root, Path::new("l")).is_err(),
        "a link is no folder"
    );
    fs::remove_dir(src.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, src.join("d")).unwrap();
    assert!(open_beneath(&root, Path::new("d")).is_err());
    assert!(open_beneath(&root, Path::new("../outside")).is_err());

    let mut copy = live(&src, &dst);
    copy.warm();
    copy.finish().unwrap();
    assert_eq!(snapshot(&src), snapshot(&dst));
    assert!(
        fs::symlink_metadata(dst.join("d"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "copied as the link it is, nothing read through it"
    );
}

#[test]
fn the_cap_is_decided_by_the_second_pass() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), vec![1u8; 1 << 20]).unwrap();
    fs::write(src.join("tmp"), vec![2u8; 2 << 20]).unwrap();
    let mut copy = live(&src, &dst);
    copy.cap = 2 << 20;
    copy.warm();
    // Over the cap while pass 1 ran, within it at pass 2.
    fs::remove_file(src.join("tmp")).unwrap();
    let done = copy.finish().unwrap();
    assert_eq!(snapshot(&src), snapshot(&dst));
    assert!(done.stats.bytes <= 2 << 20);

    let dst2 = dir.path().join("dst2");
    let mut copy = live(&src, &dst2);
    copy.cap = 2 << 20;
    copy.warm();
    fs::write(src.join("big"), vec![3u8; 2 << 20]).unwrap();
    match copy.finish() {
        Err(CopyError::OverCap(o)) => assert!(o.bytes > o.cap, "{o:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_root_owned_skip_entry_of_the_destination_is_left_alone() {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f").unwrap();
    let mut copy = live(&src, &dst);
    fs::create_dir(dst.join("lost+found")).unwrap();
    copy.skip = Some("lost+found");
    copy.warm();
    fs::write(src.join("g"), b"g").unwrap();
    copy.finish().unwrap();
    assert!(dst.join("lost+found").is_dir());
    assert_eq!(fs::read(dst.join("g")).unwrap(), b"g");
}
