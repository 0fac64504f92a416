//! `#[redlease::locked(...)]`: run an `async fn` under a distributed lock named from its
//! arguments, like Spring's `@RedisLock`. Use it through `redlease` with the `macros` feature:
//!
//! ```toml
//! redlease = { version = "0.1", features = ["macros"] }
//! ```
//!
//! See [`locked`] for the options and the contract.

#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod expand;
mod key;
mod options;

use proc_macro::TokenStream;

/// Runs the `async fn` under a redlease lock whose name is built from its arguments.
///
/// ```no_run
/// use redlease::{Client, locked};
///
/// #[derive(Debug)]
/// enum ShopError {
///     Lock(redlease::Error),
///     OutOfStock,
/// }
///
/// impl From<redlease::Error> for ShopError {
///     fn from(e: redlease::Error) -> Self {
///         ShopError::Lock(e)
///     }
/// }
///
/// struct Order {
///     id: u64,
/// }
///
/// struct OrderService {
///     client: Client,
/// }
///
/// impl OrderService {
///     // One caller at a time per order, across every process; others wait up to 5 s,
///     // then get `Err(ShopError::Lock(redlease::Error::Busy { .. }))`.
///     #[locked(key = "order:{order.id}", client = self.client, wait = "5s", busy = error)]
///     async fn pay(&self, order: &Order) -> Result<u64, ShopError> {
///         if order.id == 0 {
///             return Err(ShopError::OutOfStock);
///         }
///         Ok(order.id)
///     }
///
///     // The nightly report runs on one instance only; the others skip it at once.
///     #[locked(key = "report:{day}", client = self.client, busy = skip(Ok(false)))]
///     async fn nightly_report(&self, day: &str) -> Result<bool, ShopError> {
///         Ok(true)
///     }
/// }
///
/// // A free fn naming its client argument; it waits as long as it takes (the default).
/// #[locked(key = "stock:{sku}", client = client)]
/// async fn restock(client: &Client, sku: u32) -> redlease::Result<()> {
///     Ok(())
/// }
/// ```
///
/// # The contract
/// - On an `async fn` (free, or a method taking `self` in any form) returning
///   `Result<T, E>` with `E: From<redlease::Error>` (`redlease::Result<T>`, `anyhow::Result<T>`
///   and your own error type with a `From` impl all fit). Errors of the lock itself — Redis
///   unreachable, a lost lease, a bad name — come back as `Err(E::from(error))`; the body's own
///   `Err`s and `?`s are returned unchanged.
/// - The body runs through `Lock::run` (waiting without limit) or `Lock::try_run` (a bounded
///   wait): each call is its **own owner**, so concurrent calls exclude each other even inside
///   one task (`join!`, `for_each_concurrent`), and a `#[locked]` fn called from the body of
///   another one with the same key **re-enters** instead of deadlocking.
/// - The lock is released when the body ends (also by `return` or `?`), and when the returned
///   future is dropped.
///
/// # Options
/// | option | meaning | default |
/// |---|---|---|
/// | `key = "order:{order.id}"` | the lock name; `{arg}`, `{arg.field}`, `{arg.0}`, `{arg.method()}` (no arguments; chains allowed) and `{self.field}` are replaced with their `Display`; `{{` and `}}` are braces. Names are checked at compile time: an unknown one is an error at the key. | required |
/// | `client = <expr>` | the `redlease::Client`: an argument (`client`, of type `Client`, `&Client`, `Arc<Client>`), a field (`self.client`), a static (`CLIENT`, also a `LazyLock<Client>`), or a call returning `&Client` (`app::client()`): anything that derefs to `Client` | required |
/// | `wait = "5s"` | how long one try waits for the lock; `"0s"` makes one attempt. A humantime literal (`"100ms"`, `"1m 30s"`), checked at compile time. Needs `busy = skip(..)` or `busy = error`. | `"0s"` with `skip`/`error` |
/// | `lease = "30s"` | hold at most this long, with no renewal | the watchdog renews the lease while the body runs |
/// | `busy = wait` | wait as long as it takes (`Lock::run`) | yes |
/// | `busy = skip(<expr>)` | when the lock stays busy, return `<expr>` (of the fn's return type, e.g. `Ok(None)`) without running the body. The expression is evaluated after the arguments moved into the body: it may use arguments that are shared references or `Copy`, not owned ones (nor `&mut`). | |
/// | `busy = error` | when the lock stays busy, return `Err(E::from(redlease::Error::Busy { name, waited: <wait> }))` | |
/// | `retries = 3` | after a try found the lock busy, try again up to 3 more times | 0 |
/// | `pause = "100ms"` | the pause before each retry | `"100ms"` |
/// | `on_lost = cancel` | if the lease is lost while the body runs, the body is dropped at its next `.await` and the fn returns `Err(E::from(redlease::Error::LeaseLost { .. }))` (what `Lock::run` does; the only behaviour) | `cancel` |
/// | `held = h` | binds the `redlease::HeldLock` as `h` in the body (name, fencing token, `lost()`) | unbound |
/// | `fenced = true` | hand out fencing tokens (`h.fencing_token()`) | `false` |
///
/// # Errors
/// A `#[locked]` fn returns `Err(E::from(e))` for the errors of `Lock::run` / `Lock::try_run`:
/// `redlease::Error::LeaseLost` when the lease was lost while the body ran (the body was
/// cancelled), `Error::InvalidName` for a key that builds an empty or too long name,
/// `Error::Timeout` / `Error::Redis` when Redis is unreachable, `Error::Shutdown` after
/// `Client::shutdown`; and, with `busy = error`, `Error::Busy` when the lock stayed busy.
///
/// # Compile errors
/// An unknown argument in the key, a bad duration literal, a non-`async` fn, an unknown or
/// repeated option, a missing `key` or `client`, `wait`/`retries` with `busy = wait`, `pause`
/// without `retries`, a zero `lease`, and a fn without a return type.
#[proc_macro_attribute]
pub fn locked(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function = match syn::parse::<syn::ItemFn>(item.clone()) {
        Ok(function) => function,
        Err(e) => {
            let mut out: TokenStream = e.to_compile_error().into();
            out.extend(item);
            return out;
        }
    };
    let expanded =
        syn::parse::<options::Options>(attr).and_then(|opts| expand::expand(opts, function));
    match expanded {
        Ok(tokens) => tokens.into(),
        Err(e) => {
            // The fn as written stays (so its callers still resolve), quietly: the error is the
            // only one reported.
            let mut out: TokenStream = e.to_compile_error().into();
            out.extend(TokenStream::from(quote::quote!(#[allow(unused_variables)])));
            out.extend(item);
            out
        }
    }
}
