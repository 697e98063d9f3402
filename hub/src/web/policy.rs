//! The page's Content-Security-Policy, in its own file because two programs read it: the hub
//! (the header on every page answer) and `build.rs` (it writes the policy into `sw.js`, which
//! puts it on every answer it serves from its cache).

/// The policy every page response carries: scripts and styles from the hub only (no inline
/// script can run, whatever text ends up in the page), images also from `data:`/`blob:` (file
/// previews), sockets to the hub, the service worker and the manifest from the hub, never
/// framed, no `<base>` rewriting.
/// No plugins (`object-src 'none'`). `connect-src` names `ws: wss:` because Safari before 15.4
/// did not count the page's own WebSocket origin as `'self'`, and `https: http:` because a page
/// paired with several machines calls each machine's hub at its own origin (their tunnels'
/// addresses live in the page, not here; sockets could reach anywhere already).
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; \
connect-src 'self' https: http: ws: wss:; worker-src 'self'; manifest-src 'self'; object-src 'none'; frame-ancestors 'none'; \
base-uri 'none'; form-action 'self'";
