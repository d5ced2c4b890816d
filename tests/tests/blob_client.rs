//! The Blob client against Azurite: blocks with checksums, block lists with metadata and
//! conditional create, block-by-block ranged reads, listing with prefix/delimiter/paging.

use bytes::Bytes;
use tablevault_azure::blob::{BlobClient, ListOptions, PutOptions};
use tablevault_tests::{TestEnv, unique_lower};

#[tokio::test]
async fn a_blob_of_several_blocks_reads_back_block_by_block() {
    let env = TestEnv::start().await;
    let c = BlobClient::new(&env.account, &unique_lower("c")).unwrap();
    assert!(c.create_container().await.unwrap());
    assert!(!c.create_container().await.unwrap());

    let blocks: Vec<Bytes> = (0..4u8)
        .map(|i| Bytes::from(vec![i; 1000 + i as usize * 777]))
        .collect();
    let ids: Vec<String> = (0..4).map(|i| format!("{i:08}")).collect();
    let name = "job/data/T1/task 1/attempt/00000";
    for (id, data) in ids.iter().zip(&blocks) {
        c.put_block(name, id, data.clone()).await.unwrap();
    }
    let listed = c.get_block_list(name).await.unwrap();
    assert_eq!(listed.uncommitted.len(), 4);
    assert!(listed.committed.is_empty());

    let opts = PutOptions {
        metadata: vec![
            ("tvformat".into(), "1".into()),
            ("entities".into(), "42".into()),
        ],
        content_type: Some("application/xml".into()),
        if_none_match: true,
        ..Default::default()
    };
    c.put_block_list(name, &ids, &opts).await.unwrap();
    let err = c.put_block_list(name, &ids, &opts).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("BlobAlreadyExists"))
    );

    let listed = c.get_block_list(name).await.unwrap();
    let sizes: Vec<u64> = listed.committed.iter().map(|b| b.size).collect();
    assert_eq!(
        sizes,
        blocks.iter().map(|b| b.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(listed.committed[2].id, "00000002");

    let mut offset = 0;
    for (i, b) in listed.committed.iter().enumerate() {
        let got = c.get_range(name, offset, b.size).await.unwrap();
        assert_eq!(got, blocks[i], "block {i}");
        offset += b.size;
    }
    let props = c.properties(name).await.unwrap().unwrap();
    assert_eq!(props.content_length, offset);
    assert_eq!(
        props.metadata.get("entities").map(String::as_str),
        Some("42")
    );
    assert!(c.properties("job/missing").await.unwrap().is_none());

    let err = c.get_range(name, offset + 10, 5).await.unwrap_err();
    assert_eq!(err.status(), Some(416));
    // A range that starts inside the blob and runs past its end: the service answers
    // with what there is. That is final (a blob shorter than its record), not a cut
    // connection to retry until the deadline.
    let err = c.get_range(name, offset - 3, 10).await.unwrap_err();
    assert_eq!(err.status(), Some(416), "{err}");
    assert!(!err.is_retryable(), "{err}");
}

#[tokio::test]
async fn put_get_list_and_delete() {
    let env = TestEnv::start().await;
    let c = BlobClient::new(&env.account, &unique_lower("c")).unwrap();
    c.create_container().await.unwrap();
    for name in [
        "b/1/x.json",
        "b/1/y.json",
        "b/2/x.json",
        "b/3.json",
        "a.json",
        "b/ü é.json",
    ] {
        c.put_blob(name, Bytes::from(name.to_string()), &PutOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(
        c.get("b/ü é.json").await.unwrap(),
        Bytes::from("b/ü é.json")
    );
    assert!(c.get_if_exists("nope.json").await.unwrap().is_none());

    let err = c
        .put_blob("a.json", Bytes::from("again"), &PutOptions::create_only())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("BlobAlreadyExists"));

    // Delimiter listing: blobs and virtual directories under b/.
    let page = c
        .list_all(&ListOptions {
            prefix: Some("b/"),
            delimiter: Some("/"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut names: Vec<_> = page.blobs.iter().map(|b| b.name.clone()).collect();
    names.sort();
    assert_eq!(names, vec!["b/3.json", "b/ü é.json"]);
    assert_eq!(page.prefixes, vec!["b/1/", "b/2/"]);

    // Paging with two per page.
    let first = c
        .list_page(
            &ListOptions {
                max_results: Some(2),
                ..Default::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(first.blobs.len(), 2);
    assert!(first.next_marker.is_some());
    let all = c
        .list_all(&ListOptions {
            max_results: Some(2),
            include_metadata: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(all.blobs.len(), 6);

    assert!(c.delete("b/3.json").await.unwrap());
    assert!(!c.delete("b/3.json").await.unwrap());
    assert!(c.get_if_exists("b/3.json").await.unwrap().is_none());
}

#[tokio::test]
async fn hostile_blob_names_are_refused() {
    let env = TestEnv::start().await;
    let c = BlobClient::new(&env.account, &unique_lower("c")).unwrap();
    for bad in ["", "a//b", "../x", "a/./b", "/abs"] {
        assert!(c.get(bad).await.is_err(), "{bad:?}");
    }
    assert!(BlobClient::new(&env.account, "Bad_Container").is_err());
}

#[tokio::test]
async fn listings_carry_etags_that_change_with_every_write() {
    let env = TestEnv::start().await;
    let c = BlobClient::new(&env.account, &unique_lower("etag")).unwrap();
    c.create_container().await.unwrap();
    let etag = |page: &tablevault_azure::blob::ListPage| page.blobs[0].etag.clone();
    c.put_blob("b", Bytes::from_static(b"1"), &Default::default())
        .await
        .unwrap();
    let first = etag(&c.list_all(&Default::default()).await.unwrap());
    c.put_blob("b", Bytes::from_static(b"2"), &Default::default())
        .await
        .unwrap();
    let second = etag(&c.list_all(&Default::default()).await.unwrap());
    assert!(!first.is_empty() && first != second, "{first} {second}");
}

/// `If-Match: *` replaces a blob that exists and never creates one (how an idle
/// heartbeat avoids bringing back a blob under a job that was removed); a listing's ETag
/// is the one the write returned (how a coordinator knows a record it created).
#[tokio::test]
async fn replace_only_writes_never_create_and_listings_show_the_written_etag() {
    let env = TestEnv::start().await;
    let c = BlobClient::new(&env.account, &unique_lower("ifm")).unwrap();
    c.create_container().await.unwrap();
    let replace = tablevault_azure::blob::PutOptions {
        if_exists: true,
        ..Default::default()
    };
    let err = c
        .put_blob("missing", Bytes::from_static(b"x"), &replace)
        .await
        .unwrap_err();
    assert!(matches!(err.status(), Some(404 | 412)), "{err}");
    assert!(c.get_if_exists("missing").await.unwrap().is_none());
    let written = c
        .put_blob("here", Bytes::from_static(b"1"), &Default::default())
        .await
        .unwrap();
    let listed = c.list_all(&Default::default()).await.unwrap().blobs[0]
        .etag
        .clone();
    assert_eq!(
        written.trim_matches('"'),
        listed.trim_matches('"'),
        "the same ETag, quotes aside"
    );
    c.put_blob("here", Bytes::from_static(b"2"), &replace)
        .await
        .unwrap();
    assert_eq!(
        c.get_if_exists("here").await.unwrap().as_deref(),
        Some(&b"2"[..])
    );
    // Only over the version read (If-Match: ETAG): a stale ETag is refused, the current
    // one writes; listings carry the service's write time and clock.
    let stale = tablevault_azure::blob::PutOptions {
        if_match: Some(written.clone()),
        ..Default::default()
    };
    let err = c
        .put_blob("here", Bytes::from_static(b"3"), &stale)
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(412), "{err}");
    let current = c.properties("here").await.unwrap().unwrap().etag;
    let fresh = tablevault_azure::blob::PutOptions {
        if_match: Some(current),
        ..Default::default()
    };
    c.put_blob("here", Bytes::from_static(b"3"), &fresh)
        .await
        .unwrap();
    let page = c.list_all(&Default::default()).await.unwrap();
    let now = std::time::SystemTime::now();
    let near = |t: Option<std::time::SystemTime>| {
        t.is_some_and(|t| {
            now.duration_since(t)
                .or_else(|e| Ok::<_, ()>(e.duration()))
                .unwrap()
                < std::time::Duration::from_secs(60)
        })
    };
    assert!(near(page.service_time), "{:?}", page.service_time);
    assert!(
        near(page.blobs[0].last_modified),
        "{:?}",
        page.blobs[0].last_modified
    );
}
