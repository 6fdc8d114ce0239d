//! The label types the benches and `hotpath` walk, written once so that
//! every figure over labels measures the same shapes.

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
