//! Interposition: the one hook idiom every layer's hooks use (`hook`), the exported `dlsym` and
//! `dlvsym` that hand out the layers' hooks (`dlsym`), and the libc entry points that end or
//! replace the image (`libc`: `_exit`/`_Exit`, `exec*`), which call the runtime's entry points
//! and nothing else.
//!
//! May use: the runtime. Never a layer (the hook table is the layers', handed over by lib.rs)
//! nor `bench`.

pub mod dlsym;
pub mod hook;
pub mod libc;
