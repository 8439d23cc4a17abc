fn main() {
    ringvisor_build::Behaviours::new()
        .behaviour("token_bucket", "kernels/token_bucket.cu", "token_bucket")
        .state("tb_state")
        // the message structs' C layouts, for tests/limiters.rs to check the Rust ones against
        .c_struct("tb_init", &["client", "capacity", "refill_per_sec"])
        .c_struct("tb_request", &["op", "cost"])
        .c_struct("tb_reply", &["client", "granted", "tokens_left", "reserved", "granted_total", "denied_total"])
        .compile("rate_limiter_behaviours")
        .expect("the token_bucket behaviour compiles");
}
