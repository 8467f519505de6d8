//! `mongo-sim`: one simulated MongoDB replica-set member (see `quorum_e2e::mongo_sim`).
//!
//! `mongo-sim init-root-user --mongod <path> --bind_ip <ip> --port <port> --dbpath <dir>`
//! instead prepares an empty dbpath for a real `mongod` the way the official image's
//! entrypoint does (see `quorum_e2e::mongo::bootstrap_root_user`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = if args.first().map(String::as_str) == Some("init-root-user") {
        runtime.block_on(quorum_e2e::mongo::init_root_user_main(&args[1..]))
    } else {
        match quorum_e2e::mongo_sim::Options::parse(&args) {
            Ok(options) => runtime.block_on(quorum_e2e::mongo_sim::run(options)),
            Err(error) => {
                eprintln!("mongo-sim: {error}");
                2
            }
        }
    };
    std::process::exit(code);
}
