fn main() {
    println!("metralectl {}", env!("CARGO_PKG_VERSION"));
}
