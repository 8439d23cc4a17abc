fn main() {
    ringvisor_build::Behaviours::new()
        .behaviour("token_bucket", "kernels/token_bucket.cu", "token_bucket")
        .state("tb_state")
        .compile("rate_limiter_behaviours")
        .expect("the token_bucket behaviour compiles");
}
