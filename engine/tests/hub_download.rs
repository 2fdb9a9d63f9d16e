//! Hub downloads against a local HTTP server that speaks the Hub's download protocol
//! (`/api/models/{repo}/revision/{rev}`, `HEAD`/`GET` `/{repo}/resolve/{rev}/{file}` with
//! `Range`, `X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`), serving the shipped demo
//! checkpoint: a clean pull into the standard cache layout, a corrupted file (refused, nothing
//! cached), an interrupted download (resumed from where it stopped), the lock verified on later
//! runs and in offline mode, and `met serve ORG/NAME` end to end.

mod server_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrale_engine::loader::hub::{self, HubConfig, HubError};
use serde_json::json;
use sha2::{Digest, Sha256};

const REPO: &str = "metrale-test/demo";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// The LFS file whose download the faults play with.
const BIG: &str = "model.safetensors";

#[derive(Default)]
struct Faults {
    /// Serve these bytes instead of the real ones for `BIG` (same length).
    corrupt: bool,
    /// Cut the connection after this many bytes of `BIG`, once.
    cut_after: Option<usize>,
}

struct Hub {
    files: BTreeMap<String, Vec<u8>>,
    faults: Mutex<Faults>,
    /// (method, file, Range header) of every file request.
    log: Mutex<Vec<(String, String, Option<String>)>>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn demo_dir() -> PathBuf {
    server_support::repo_root().join("models/demo")
}

impl Hub {
    fn demo() -> Arc<Self> {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(demo_dir()).expect("models/demo") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            files.insert(name, std::fs::read(&path).expect("read"));
        }
        Arc::new(Self {
            files,
            faults: Mutex::new(Faults::default()),
            log: Mutex::new(Vec::new()),
        })
    }

    fn requests_for(&self, file: &str) -> Vec<(String, Option<String>)> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|(_, f, _)| f == file)
            .map(|(m, _, r)| (m.clone(), r.clone()))
            .collect()
    }
}

async fn revision(
    State(hub): State<Arc<Hub>>,
    UrlPath((org, name, rev)): UrlPath<(String, String, String)>,
) -> Response {
    if format!("{org}/{name}") != REPO || (rev != "main" && rev != COMMIT) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let siblings: Vec<_> = hub
        .files
        .keys()
        .map(|f| json!({"rfilename": f}))
        .chain([json!({"rfilename": "pytorch_model.bin"})])
        .collect();
    axum::Json(json!({"id": REPO, "sha": COMMIT, "siblings": siblings})).into_response()
}

async fn resolve(
    State(hub): State<Arc<Hub>>,
    method: Method,
    headers: HeaderMap,
    UrlPath((org, name, rev, file)): UrlPath<(String, String, String, String)>,
) -> Response {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    hub.log
        .lock()
        .expect("log")
        .push((method.to_string(), file.clone(), range.clone()));
    let Some(real) = hub
        .files
        .get(&file)
        .filter(|_| format!("{org}/{name}") == REPO && rev == COMMIT)
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let lfs = file.ends_with(".safetensors");
    let mut bytes = real.clone();
    let (corrupt, cut) = {
        let mut f = hub.faults.lock().expect("faults");
        let cut = if method == Method::GET && file == BIG {
            f.cut_after.take()
        } else {
            None
        };
        (f.corrupt && file == BIG, cut)
    };
    if corrupt {
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
    }
    let mut resp = Response::builder()
        .header("x-repo-commit", COMMIT)
        .header(header::ACCEPT_RANGES, "bytes");
    if lfs {
        resp = resp
            .header("x-linked-etag", format!("\"{}\"", sha256_hex(real)))
            .header("x-linked-size", real.len().to_string())
            .header(header::ETAG, "\"git-blob-id-of-the-pointer\"");
    } else {
        resp = resp.header(header::ETAG, format!("\"{}\"", &sha256_hex(real)[..40]));
    }
    if method == Method::HEAD {
        return resp
            .header(header::CONTENT_LENGTH, real.len().to_string())
            .body(Body::empty())
            .expect("response");
    }
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let (status, body) = match start {
        Some(s) if s < bytes.len() => (StatusCode::PARTIAL_CONTENT, bytes[s..].to_vec()),
        Some(_) => return StatusCode::RANGE_NOT_SATISFIABLE.into_response(),
        None => (StatusCode::OK, bytes),
    };
    let body = match cut {
        // Send the first `n` bytes, then fail the stream: the connection is cut mid-body.
        Some(n) => {
            let head = body[..n.min(body.len())].to_vec();
            let stream = futures_util::stream::iter(vec![
                Ok::<_, std::io::Error>(head),
                Err(std::io::Error::other("connection cut by the test")),
            ]);
            resp = resp.header(header::CONTENT_LENGTH, body.len().to_string());
            Body::from_stream(stream)
        }
        None => Body::from(body),
    };
    resp.status(status).body(body).expect("response")
}

/// Serves `hub` on 127.0.0.1; returns its base URL.
async fn serve(hub: Arc<Hub>) -> String {
    let app = Router::new()
        .route("/api/models/{org}/{name}/revision/{rev}", get(revision))
        .route(
            "/{org}/{name}/resolve/{rev}/{*file}",
            get(resolve).head(resolve),
        )
        .with_state(hub);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn config(endpoint: &str, cache: &Path) -> HubConfig {
    HubConfig {
        endpoint: endpoint.to_owned(),
        cache: cache.to_path_buf(),
        token: None,
        offline: false,
    }
}

async fn fetch(cfg: &HubConfig) -> Result<PathBuf, HubError> {
    hub::fetch(cfg, REPO, "main", &mut |_, _, _| {}).await
}

/// A checkpoint whose config.json met cannot load (here a quantization it does not read) is
/// refused once that file is in, with the reason, and no weight is fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_met_cannot_load_is_refused_before_its_weights_download() {
    let mut hub_state = Hub::demo();
    let files = &mut Arc::get_mut(&mut hub_state).expect("not shared yet").files;
    let mut cfg: serde_json::Value = serde_json::from_slice(&files["config.json"]).expect("config");
    cfg["quantization_config"] = json!({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"});
    files.insert("config.json".into(), cfg.to_string().into_bytes());
    let endpoint = serve(hub_state.clone()).await;
    let cache = tempfile::tempdir().expect("cache");
    let err = fetch(&config(&endpoint, cache.path()))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("\"W4A8_AWQ\"") && err.contains("NVFP4") && err.contains("nothing else"),
        "{err}"
    );
    assert!(hub_state.requests_for(BIG).is_empty(), "no weight fetched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_fills_the_standard_cache_layout_and_writes_a_lock() {
    let hub_state = Hub::demo();
    let endpoint = serve(hub_state.clone()).await;
    let cache = tempfile::tempdir().expect("cache");
    let cfg = config(&endpoint, cache.path());

    let mut seen: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let snapshot = hub::fetch(&cfg, REPO, "main", &mut |f, d, t| {
        seen.insert(f.to_owned(), (d, t));
    })
    .await
    .expect("pull");

    let repo_dir = cache.path().join("models--metrale-test--demo");
    assert_eq!(snapshot, repo_dir.join("snapshots").join(COMMIT));
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).expect("refs/main"),
        COMMIT
    );
    let real = &hub_state.files[BIG];
    let link = std::fs::read_link(snapshot.join(BIG)).expect("a symlink");
    assert_eq!(link, Path::new("../../blobs").join(sha256_hex(real)));
    for (name, bytes) in hub_state.files.iter().filter(|(n, _)| *n != "README.md") {
        assert_eq!(
            &std::fs::read(snapshot.join(name)).expect("read"),
            bytes,
            "{name}"
        );
    }
    assert!(
        !snapshot.join("pytorch_model.bin").exists(),
        "unneeded formats are skipped"
    );
    assert!(!snapshot.join("README.md").exists(), "so are documents");
    let size = real.len() as u64;
    assert_eq!(seen[BIG], (size, size), "progress reached the end");

    let lock = hub::read_lock(&repo_dir, COMMIT)
        .expect("read")
        .expect("a lock");
    assert_eq!(lock.commit, COMMIT);
    assert_eq!(lock.files[BIG].sha256, sha256_hex(real));
    assert_eq!(
        lock.files.len(),
        hub_state.files.len() - 1,
        "all but the README"
    );

    // A second run verifies against the lock and downloads nothing.
    let gets_before = hub_state.requests_for(BIG).len();
    fetch(&cfg).await.expect("second pull");
    assert_eq!(hub_state.requests_for(BIG).len(), gets_before);

    // Offline, the cached snapshot is used; a cached file changed behind our back is refused.
    let offline = HubConfig {
        offline: true,
        ..cfg.clone()
    };
    assert_eq!(fetch(&offline).await.expect("offline"), snapshot);
    let blob = repo_dir.join("blobs").join(sha256_hex(real));
    let mut tampered = real.clone();
    tampered[0] ^= 1;
    std::fs::write(&blob, tampered).expect("tamper");
    let err = fetch(&offline).await.expect_err("tampered file refused");
    assert!(
        err.to_string()
            .contains("does not match the lock written on its first pull"),
        "{err}"
    );

    // A snapshot another tool left (no lock of ours) is adopted offline: hashed, locked, used.
    std::fs::write(&blob, real).expect("restore");
    std::fs::remove_dir_all(repo_dir.join("metrale-locks")).expect("drop the lock");
    assert_eq!(fetch(&offline).await.expect("adopted offline"), snapshot);
    assert_eq!(
        hub::read_lock(&repo_dir, COMMIT)
            .expect("read")
            .expect("lock written"),
        lock
    );

    let elsewhere = tempfile::tempdir().expect("empty cache");
    let err = fetch(&config_offline(&endpoint, elsewhere.path()))
        .await
        .expect_err("not cached");
    assert!(err.to_string().contains("HF_HUB_OFFLINE is set"), "{err}");
}

fn config_offline(endpoint: &str, cache: &Path) -> HubConfig {
    HubConfig {
        offline: true,
        ..config(endpoint, cache)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_file_is_refused_and_nothing_is_cached() {
    let hub_state = Hub::demo();
    hub_state.faults.lock().expect("faults").corrupt = true;
    let endpoint = serve(hub_state.clone()).await;
    let cache = tempfile::tempdir().expect("cache");
    let err = fetch(&config(&endpoint, cache.path()))
        .await
        .expect_err("corrupted download refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{BIG} of {REPO} is corrupted")),
        "{msg}"
    );
    assert!(msg.contains("nothing was cached"), "{msg}");
    let blobs = cache.path().join("models--metrale-test--demo/blobs");
    let sha = sha256_hex(&hub_state.files[BIG]);
    assert!(!blobs.join(&sha).exists(), "no blob");
    assert!(
        !blobs.join(format!("{sha}.incomplete")).exists(),
        "no partial file"
    );
    assert!(
        !cache
            .path()
            .join("models--metrale-test--demo/snapshots")
            .join(COMMIT)
            .join(BIG)
            .exists()
    );
    assert!(
        hub::read_lock(&cache.path().join("models--metrale-test--demo"), COMMIT)
            .expect("read")
            .is_none(),
        "no lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_download_resumes_where_it_stopped() {
    let hub_state = Hub::demo();
    let cut = 1_000_000;
    hub_state.faults.lock().expect("faults").cut_after = Some(cut);
    let endpoint = serve(hub_state.clone()).await;
    let cache = tempfile::tempdir().expect("cache");
    let cfg = config(&endpoint, cache.path());

    let err = fetch(&cfg).await.expect_err("the cut download fails");
    assert!(err.to_string().contains("run again to resume"), "{err}");
    let sha = sha256_hex(&hub_state.files[BIG]);
    let partial = cache
        .path()
        .join("models--metrale-test--demo/blobs")
        .join(format!("{sha}.incomplete"));
    let kept = std::fs::metadata(&partial).expect("partial kept").len();
    assert_eq!(kept, cut as u64);

    let snapshot = fetch(&cfg).await.expect("resumed");
    assert_eq!(
        std::fs::read(snapshot.join(BIG)).expect("read"),
        hub_state.files[BIG]
    );
    assert!(!partial.exists());
    let gets: Vec<Option<String>> = hub_state
        .requests_for(BIG)
        .into_iter()
        .filter(|(m, _)| m == "GET")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(gets, [None, Some(format!("bytes={cut}-"))]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn met_serve_takes_a_hub_repository_id() {
    let hub_state = Hub::demo();
    let endpoint = serve(hub_state).await;
    let cache = tempfile::tempdir().expect("cache");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args(["serve", REPO, "--port", "1", "--max-seq-len", "0"])
        .env("HF_ENDPOINT", &endpoint)
        .env("HF_HUB_CACHE", cache.path())
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .await
        .expect("run met");
    // The flags are refused after the download: the checkpoint is in the cache, and the error
    // is about the flag, not the model.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("met: {REPO} is at ")), "{err}");
    assert!(err.contains("--max-seq-len"), "{err}");
    assert!(
        cache
            .path()
            .join("models--metrale-test--demo/snapshots")
            .join(COMMIT)
            .join("config.json")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn met_serve_publishes_the_download_on_its_metrics_socket() {
    use std::io::{BufRead, BufReader};
    let endpoint = serve(Hub::demo()).await;
    let cache = tempfile::tempdir().expect("cache");
    let sock = cache.path().join("m.sock");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut met = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args(["serve", REPO, "--no-tui", "--port", &port.to_string()])
        .arg("--metrics-socket")
        .arg(&sock)
        .env("HF_ENDPOINT", &endpoint)
        .env("HF_HUB_CACHE", cache.path())
        .env_remove("HF_HUB_OFFLINE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run met");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let stream = loop {
        if let Ok(s) = std::os::unix::net::UnixStream::connect(&sock) {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "no metrics socket");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .expect("timeout");
    // The phase history up to `ready`: every file's download, in bytes, complete.
    let mut downloaded = BTreeMap::new();
    for line in BufReader::new(stream).lines() {
        let v: serde_json::Value = serde_json::from_str(&line.expect("a line")).expect("JSON");
        if v["type"] != "phase" {
            continue;
        }
        if v["phase"] == "ready" {
            break;
        }
        if v["phase"] == "download" {
            assert_eq!(v["unit"], "bytes", "{v}");
            let file = v["message"].as_str().expect("the file").to_owned();
            downloaded.insert(file, (v["done"].as_u64(), v["total"].as_u64()));
        }
    }
    let _ = met.kill();
    let _ = met.wait();
    // However late the reader connected, the history holds the latest download event (the
    // last file, complete); each file it saw live reached its real size.
    assert!(!downloaded.is_empty(), "no download phase before ready");
    for (file, (done, total)) in &downloaded {
        let size = std::fs::metadata(demo_dir().join(file))
            .unwrap_or_else(|e| panic!("{file} is not a file of the checkpoint: {e}"))
            .len();
        assert_eq!(total, &Some(size), "{file}: {downloaded:?}");
        assert!(done.is_some_and(|d| d <= size), "{file}: {downloaded:?}");
    }
    let last = downloaded.keys().max().expect("a file");
    assert_eq!(downloaded[last].0, downloaded[last].1, "{downloaded:?}");
}

/// `--port 0` with a Hub model: the metrics socket starts (for the download's progress) before
/// the port is known, under a per-process name, and takes the port's default name once the
/// port is bound, where `metralectl top --port PORT` looks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_zero_moves_the_early_metrics_socket_to_the_ports_name() {
    use std::io::{BufRead, BufReader};
    let endpoint = serve(Hub::demo()).await;
    let cache = tempfile::tempdir().expect("cache");
    let runtime = tempfile::tempdir().expect("runtime dir");
    let mut met = std::process::Command::new(env!("CARGO_BIN_EXE_met"))
        .args(["serve", REPO, "--no-tui", "--port", "0"])
        .env("HF_ENDPOINT", &endpoint)
        .env("HF_HUB_CACHE", cache.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("HF_HUB_OFFLINE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run met");
    let stdout = met.stdout.take().expect("stdout");
    let mut port = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let addr = rest.split_whitespace().next().expect("an address");
            port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            break;
        }
    }
    let dir = runtime.path().join("metrale");
    let names = || -> Vec<String> {
        std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let found = names();
    let _ = met.kill();
    let _ = met.wait();
    let port = port.expect("met printed the address it listens on");
    assert_ne!(port, 0);
    assert_eq!(
        found,
        vec![format!("met-{port}.sock")],
        "in {}",
        dir.display()
    );
}

/// `metralectl pull` draws `met download`'s progress as one bar (on a pipe: a note when a file
/// starts and when it is complete, not met's line a file every few seconds), and a download cut
/// short resumes where it stopped, saying so (issue 38).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metralectl_pull_shows_one_progress_and_resumes_a_cut_download() {
    let hub_state = Hub::demo();
    let cut = 1_000_000;
    hub_state.faults.lock().expect("faults").cut_after = Some(cut);
    let endpoint = serve(hub_state.clone()).await;
    let cache = tempfile::tempdir().expect("cache");
    let config = tempfile::tempdir().expect("config");
    std::fs::create_dir_all(config.path().join("recipes")).expect("mkdir");
    std::fs::write(config.path().join("recipes/hubdemo.toml"), hub_recipe()).expect("recipe");
    let pull = || {
        tokio::process::Command::new(server_support::metralectl())
            .args(["pull", "hubdemo", "--no-image"])
            .env("METRALE_CONFIG_DIR", config.path())
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HUB_CACHE", cache.path())
            .env_remove("HF_HUB_OFFLINE")
            .env("NO_COLOR", "1")
            .output()
    };
    let out = pull().await.expect("pull");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("run again to resume"), "{err}");
    let size = hub_state.files[BIG].len() as f64 / 1e6;
    assert!(
        err.contains(&format!("note: download {BIG}: {size:.1} MB\n")),
        "{err}"
    );
    assert!(
        !err.contains("met: download"),
        "met's own lines are drawn as one: {err}"
    );

    let out = pull().await.expect("pull again");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "note: download {BIG}: {size:.1} MB (resumed at {:.1} MB)",
            cut as f64 / 1e6
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("note: download {BIG}: complete")),
        "{err}"
    );
}

/// A user recipe like `demo`, but its checkpoint on the (local) Hub, pinned to `COMMIT`.
fn hub_recipe() -> String {
    let demo = std::fs::read_to_string(server_support::repo_root().join("recipes/demo.toml"))
        .expect("recipes/demo.toml");
    demo.replace("name = \"demo\"", "name = \"hubdemo\"")
        .replace(
            "path = \"models/demo\"",
            &format!("repo = \"{REPO}\"\nrevision = \"{COMMIT}\""),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metralectl_pulls_then_runs_a_hub_recipe_natively() {
    let endpoint = serve(Hub::demo()).await;
    let cache = tempfile::tempdir().expect("cache");
    let config = tempfile::tempdir().expect("config");
    let state = tempfile::tempdir().expect("state");
    std::fs::create_dir_all(config.path().join("recipes")).expect("mkdir");
    std::fs::write(config.path().join("recipes/hubdemo.toml"), hub_recipe()).expect("recipe");
    let metralectl = server_support::metralectl();
    let ctl = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(&metralectl);
        cmd.args(args)
            .env("METRALE_CONFIG_DIR", config.path())
            .env("METRALE_STATE_DIR", state.path())
            .env("HF_ENDPOINT", &endpoint)
            .env("HF_HUB_CACHE", cache.path())
            .env_remove("HF_HUB_OFFLINE")
            .env("NO_COLOR", "1");
        cmd
    };

    let out = ctl(&["pull", "hubdemo", "--no-image"])
        .output()
        .await
        .expect("pull");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snapshot = cache
        .path()
        .join("models--metrale-test--demo/snapshots")
        .join(COMMIT);
    assert!(
        stdout.contains(&format!("is at {}", snapshot.display())),
        "{stdout}"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port()
        .to_string();
    let out = ctl(&[
        "run", "hubdemo", "--native", "--detach", "--json", "--port", &port,
    ])
    .output()
    .await
    .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resp: serde_json::Value = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .json(&json!({"model": "hubdemo", "temperature": 0, "messages": [{"role": "user", "content": "What is the capital of France?"}]}))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let stop = ctl(&["stop", "hubdemo"]).output().await.expect("stop");
    assert!(stop.status.success());
    assert_eq!(
        resp["choices"][0]["message"]["content"], "The capital of France is Paris.",
        "{resp}"
    );
}
