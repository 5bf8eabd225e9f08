//! The web page at `/ui/`: plain HTML, CSS and ES modules compiled into the binary, served
//! behind the Host guard with a Content-Security-Policy that allows only its own scripts and
//! styles. The page signs in with a single-use code (see [`sessions`]) and reads the API with a
//! bearer token; it sets no cookie.

mod assets;
pub mod sessions;

pub use assets::*;
