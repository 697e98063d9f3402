//! Stopping on SIGINT or SIGTERM: a token the first one cancels.

use tokio_util::sync::CancellationToken;

/// A token cancelled by the first SIGINT or SIGTERM, with the handlers installed before it
/// returns: from then on Ctrl-C is ours to handle (`up` must end its tunnel, whenever it comes).
pub(crate) fn signals_now() -> anyhow::Result<CancellationToken> {
    let stop = CancellationToken::new();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (term, int) = rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    });
    let (mut term, mut int) = (term?, int?);
    let fired = stop.clone();
    std::thread::spawn(move || {
        rt.block_on(async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        });
        fired.cancel();
    });
    Ok(stop)
}

/// Cancels `stop` at the first SIGINT or SIGTERM (nothing if the handlers cannot be installed).
pub(crate) async fn stop_on_signals(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    stop.cancel();
}
