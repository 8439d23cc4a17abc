fn main() {
    ringvisor_build::Behaviours::new()
        .behaviour("moving_average", "kernels/moving_average.cu", "moving_average")
        .compile("moving_average_behaviours")
        .expect("the moving_average behaviour compiles");
}
