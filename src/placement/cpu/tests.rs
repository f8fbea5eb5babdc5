//! Tests over the whole CPU manager (fixture loaders in `tests/fixtures`).
