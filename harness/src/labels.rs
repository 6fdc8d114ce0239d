//! The label types the benches and `hotpath` walk, written once so that
//! every figure over labels measures the same shapes.

use fast_telemetry::LabelEnum;
use shardcount::Label;

/// Eight routes: a one-label type of 8 values.
#[derive(Clone, Copy, Debug, Label)]
pub enum Route {
    /// `/`
    Home,
    /// `/search`
    Search,
    /// `/product`
    Product,
    /// `/cart`
    Cart,
    /// `/checkout`
    Checkout,
    /// `/login`
    Login,
    /// `/logout`
    Logout,
    /// `/account`
    Account,
}

impl Route {
    /// Every route in index order: an array, so a masked index needs no
    /// bounds check in a measured loop.
    pub const ALL: [Route; 8] = [
        Route::Home,
        Route::Search,
        Route::Product,
        Route::Cart,
        Route::Checkout,
        Route::Login,
        Route::Logout,
        Route::Account,
    ];
}

/// fast-telemetry's label trait on the same enum, through the derived
/// `Label`: the same indices, so both peers count the same walk.
impl LabelEnum for Route {
    const CARDINALITY: usize = <Route as Label>::COUNT;
    const LABEL_NAME: &'static str = "route";
    fn as_index(self) -> usize {
        Label::index(&self)
    }
    fn from_index(index: usize) -> Self {
        <Route as Label>::from_index(index).unwrap_or(Route::Account)
    }
    fn variant_name(self) -> &'static str {
        Route::text(Label::index(&self), 0).unwrap_or("other")
    }
}

/// Four methods: the first label of [`Request`].
#[derive(Clone, Copy, Debug, Label)]
pub enum Method {
    /// GET
    Get,
    /// POST
    Post,
    /// PUT
    Put,
    /// DELETE
    Delete,
}

/// Two labels, 4 × 8 values.
#[derive(Clone, Copy, Debug, Label)]
pub struct Request {
    /// The method.
    pub method: Method,
    /// The route.
    pub route: Route,
}
