//! Resolves HOST with the C library's getaddrinfo (Rust's std) and connects
//! to it at PORT: built static against musl and against glibc by the test.
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (host, port) = (&args[1], args[2].parse::<u16>().expect("a port"));
    let addr = match (host.as_str(), port).to_socket_addrs() {
        Ok(mut all) => match all.find(|a| a.is_ipv4()) {
            Some(a) => a,
            None => {
                println!("unresolved {host} no IPv4 address");
                std::process::exit(2)
            }
        },
        Err(e) => {
            println!("unresolved {host} {e}");
            std::process::exit(2)
        }
    };
    match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
        Ok(mut s) => {
            let mut said = String::new();
            let _ = s.read_to_string(&mut said);
            println!("reached {host} {} {said}", addr.ip());
        }
        Err(e) => {
            println!("refused {host} {} {e}", addr.ip());
            std::process::exit(3)
        }
    }
}
