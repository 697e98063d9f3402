//! Content types by file extension, for inline viewing in a browser.

/// The Content-Type of a file name (`application/octet-stream` when unknown).
pub fn of(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" | "md" | "rs" | "toml" | "yaml" | "yml" | "py" | "sh" | "c" | "h" | "cpp" | "go"
        | "java" | "ts" | "tsx" | "jsx" | "lock" | "csv" | "ini" | "cfg" => "text/plain; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "wasm" => "application/wasm",
        "mp3" => "audio/mpeg",
        "mp4" => "video/mp4",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_and_unknown() {
        assert_eq!(super::of("a.PNG"), "image/png");
        assert_eq!(super::of("Makefile"), "application/octet-stream");
        assert_eq!(super::of("x.rs"), "text/plain; charset=utf-8");
    }
}
