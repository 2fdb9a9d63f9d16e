fn main() {
    println!("met {}", env!("CARGO_PKG_VERSION"));
}
