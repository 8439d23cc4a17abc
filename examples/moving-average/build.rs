fn main() {
    ringvisor_build::Behaviours::new()
        .behaviour("moving_average", "kernels/moving_average.cu", "moving_average")
        .state("ma_state")
        .wgsl("kernels/moving_average.wgsl")
        .c_struct("ma_init", &["aggregator", "threshold"])
        .c_struct("ma_reply", &["mean", "variance", "count", "anomaly", "reserved"])
        .compile("moving_average_behaviours")
        .expect("the moving_average behaviour compiles");
}
