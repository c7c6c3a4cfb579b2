//! Several machines on one, for tests: each "machine" is a network namespace
//! of its own, joined to a server namespace by a veth link of its own.
//!
//! A [`Network`] makes a server namespace (only its loopback, plus one end of
//! each link); [`Network::add_host`] makes a host namespace and a link
//! between the two, with the server's end at `10.231.N.1` and the host's at
//! `10.231.N.2` (a /30 each, so a host reaches the server and nothing else).
//! A server started in the server namespace (see
//! [`TestDatabase::create_in`](crate::TestDatabase::create_in)) listens on
//! the server's ends only; a process started through [`Network::command`]
//! runs in a host's namespace, and [`Network::run_in`] runs a closure on a
//! thread inside one. Cutting a link ([`Network::set_link`]) brings the
//! server's end down: packets are dropped, as when a cable is pulled, and
//! bringing it up restores the link.
//!
//! The namespaces are named (`ip netns add`), made and removed with
//! iproute2's `ip`, which needs root (`CAP_NET_ADMIN` and `CAP_SYS_ADMIN`).
//! Nothing is changed outside them: the machine's own network namespace
//! gains no interface, address or route. Dropping the [`Network`] removes
//! every namespace it made (with their links), failing tests included; end
//! the processes started in them first.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces and links made for one test.
#[derive(Debug)]
pub struct Network {
    ip: PathBuf,
    server: String,
    hosts: Vec<Host>,
}

/// One simulated machine: a namespace and its link to the server namespace.
#[derive(Debug, Clone)]
pub struct Host {
    namespace: String,
    index: u8,
}

impl Host {
    /// The namespace's name (under `/run/netns`).
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// This host's address on its link.
    #[must_use]
    pub fn address(&self) -> String {
        format!("10.231.{}.2", self.index)
    }

    /// The server's address on this host's link: where this host reaches
    /// the server.
    #[must_use]
    pub fn server_address(&self) -> String {
        format!("10.231.{}.1", self.index)
    }

    /// The name of the server's end of the link, in the server namespace.
    fn server_link(&self) -> String {
        format!("link{}", self.index)
    }
}

impl Network {
    /// Makes the server namespace.
    ///
    /// # Errors
    ///
    /// One line saying why namespaces cannot be made here: `ip` (Debian's
    /// `iproute2`) is missing, or the process lacks the privileges.
    pub fn new() -> Result<Network, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())
            .ok_or_else(|| {
                "cannot simulate machines: iproute2's ip is not installed (install the iproute2 package)"
                    .to_owned()
            })?;
        let base = format!(
            "asynctask-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let network = Network {
            ip,
            server: format!("{base}-db"),
            hosts: Vec::new(),
        };
        network.ip_cmd(&["netns", "add", &network.server.clone()])?;
        let server = network.server.clone();
        network.ip_cmd(&["-n", &server, "link", "set", "lo", "up"])?;
        Ok(network)
    }

    /// The server namespace's name.
    #[must_use]
    pub fn server_namespace(&self) -> &str {
        &self.server
    }

    /// The server's addresses, one per host (every link's server end).
    #[must_use]
    pub fn server_addresses(&self) -> Vec<String> {
        self.hosts.iter().map(Host::server_address).collect()
    }

    /// Makes a host namespace and its link to the server namespace, up.
    ///
    /// # Errors
    ///
    /// When `ip` refuses, with its last line; or past 250 hosts.
    pub fn add_host(&mut self) -> Result<Host, String> {
        let index = u8::try_from(self.hosts.len() + 1)
            .ok()
            .filter(|n| *n <= 250)
            .ok_or("at most 250 hosts")?;
        let host = Host {
            namespace: self.server.replace("-db", &format!("-h{index}")),
            index,
        };
        self.ip_cmd(&["netns", "add", &host.namespace])?;
        // Registered at once, so that a failure below still removes it.
        self.hosts.push(host.clone());
        let server = self.server.clone();
        let link = host.server_link();
        let ns = host.namespace.clone();
        self.ip_cmd(&[
            "link", "add", &link, "netns", &server, "type", "veth", "peer", "name", "eth0",
            "netns", &ns,
        ])?;
        let server_cidr = format!("{}/30", host.server_address());
        let host_cidr = format!("{}/30", host.address());
        self.ip_cmd(&["-n", &server, "addr", "add", &server_cidr, "dev", &link])?;
        self.ip_cmd(&["-n", &ns, "addr", "add", &host_cidr, "dev", "eth0"])?;
        self.ip_cmd(&["-n", &ns, "link", "set", "lo", "up"])?;
        self.ip_cmd(&["-n", &ns, "link", "set", "eth0", "up"])?;
        self.ip_cmd(&["-n", &server, "link", "set", &link, "up"])?;
        Ok(host)
    }

    /// Cuts `host`'s link (`up = false`: its server end goes down, and what
    /// either side sends is lost) or restores it.
    ///
    /// # Panics
    ///
    /// When `ip` refuses.
    pub fn set_link(&self, host: &Host, up: bool) {
        let state = if up { "up" } else { "down" };
        if let Err(err) = self.ip_cmd(&[
            "-n",
            &self.server,
            "link",
            "set",
            &host.server_link(),
            state,
        ]) {
            panic!("cannot set {}'s link {state}: {err}", host.namespace);
        }
    }

    /// A command that runs `program` in `host`'s namespace (through `ip
    /// netns exec`, which replaces itself with the program: the child's
    /// process id is the program's).
    #[must_use]
    pub fn command(&self, host: &Host, program: impl AsRef<Path>) -> Command {
        self.command_in(&host.namespace, program)
    }

    /// A command that runs `program` in the namespace named `namespace`.
    #[must_use]
    pub fn command_in(&self, namespace: &str, program: impl AsRef<Path>) -> Command {
        let mut command = Command::new(&self.ip);
        command
            .args(["netns", "exec", namespace])
            .arg(program.as_ref());
        command
    }

    /// The program and arguments that run a program in `namespace`.
    pub(crate) fn exec_prefix(&self, namespace: &str) -> Vec<String> {
        vec![
            self.ip.display().to_string(),
            "netns".to_owned(),
            "exec".to_owned(),
            namespace.to_owned(),
        ]
    }

    /// Runs `work` on a thread of its own inside `host`'s namespace (the
    /// sockets it opens are that host's), and returns what it returns.
    ///
    /// # Panics
    ///
    /// When the namespace cannot be entered, or `work` panics.
    pub fn run_in<R: Send + 'static>(
        &self,
        host: &Host,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        self.run_in_namespace(&host.namespace, work)
    }

    /// [`run_in`](Self::run_in) for the namespace named `namespace` (the
    /// server namespace, say).
    ///
    /// # Panics
    ///
    /// As [`run_in`](Self::run_in).
    pub fn run_in_namespace<R: Send + 'static>(
        &self,
        namespace: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let path = Path::new("/run/netns").join(namespace);
        let thread = std::thread::spawn(move || {
            let file = File::open(&path)
                .unwrap_or_else(|err| panic!("cannot open {}: {err}", path.display()));
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .unwrap_or_else(|err| panic!("cannot enter {}: {err}", path.display()));
            work()
        });
        match thread.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    fn ip_cmd(&self, args: &[&str]) -> Result<(), String> {
        let output = Command::new(&self.ip)
            .args(args)
            .output()
            .map_err(|err| format!("cannot simulate machines: cannot run ip: {err}"))?;
        if output.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let why = stderr.lines().last().unwrap_or("(no output)").trim();
        Err(format!(
            "cannot simulate machines (network namespaces need root, with CAP_NET_ADMIN): \
             `ip {}` failed: {why}",
            args.join(" ")
        ))
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Removing a namespace removes the links in it.
        for host in &self.hosts {
            let _ = self.ip_cmd(&["netns", "del", &host.namespace]);
        }
        let server = self.server.clone();
        let _ = self.ip_cmd(&["netns", "del", &server]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_reaches_the_server_over_its_link_until_it_is_cut() {
        let mut network = Network::new().unwrap_or_else(|err| panic!("{err}"));
        let host = network.add_host().expect("a host");
        let other = network.add_host().expect("another host");
        // A listener in the server namespace, on the first link's address.
        let address = host.server_address();
        let listener = network.run_in_namespace(network.server_namespace(), {
            let address = address.clone();
            move || std::net::TcpListener::bind((address.as_str(), 0)).expect("binds")
        });
        let port = listener.local_addr().expect("bound").port();
        let reach = |from: &Host, to: String| {
            network.run_in(from, move || {
                std::net::TcpStream::connect_timeout(
                    &format!("{to}:{port}").parse().expect("an address"),
                    std::time::Duration::from_millis(500),
                )
                .is_ok()
            })
        };
        assert!(reach(&host, address.clone()));
        // The other host has no route to the first link's address.
        assert!(!reach(&other, address.clone()));
        network.set_link(&host, false);
        assert!(!reach(&host, address.clone()));
        network.set_link(&host, true);
        assert!(reach(&host, address.clone()));
        let names = [network.server.clone(), host.namespace.clone()];
        drop(network);
        for name in names {
            assert!(!Path::new("/run/netns").join(name).exists());
        }
    }
}
