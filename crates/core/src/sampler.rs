//! Token sampling shared by every engine: greedy, temperature, top-k,
//! top-p, with a seeded generator per request.
