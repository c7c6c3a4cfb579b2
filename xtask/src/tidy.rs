//! `cargo xtask tidy`: the house rules, checked by code so `cargo test` catches them.
//!
//! - every `.rs` file opens with a `//!` line saying what it holds;
//! - no test is skipped or expected to panic (assert on the `Err` instead);
//! - unsafe code lives in one file ([`UNSAFE_ALLOWED`]), and each `unsafe`
//!   block there says why it is sound in a `// SAFETY:` comment right above;
//! - every member inherits the workspace lints and takes every dependency from
//!   `[workspace.dependencies]`;
//! - the layers point one way: each crate depends only on crates below it (its
//!   tests, examples and benchmarks may use any layer); the model crate does not
//!   depend on tokio, nor the runtime on process spawning, nor the manager or the
//!   runtime on a database, even indirectly.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The layers, bottom first. A crate may depend only on crates of the layers
/// before its own: crates that share a layer never depend on each other (a host
/// takes the runtime without process spawning, or process spawning without the
/// runtime; the tools without the store, or the store without the tools).
/// Dev-dependencies are exempt: a crate's tests and docs may show it under the
/// layers above (the store's, under the runtime), which changes nothing a host
/// takes.
const LAYERS: &[&[&str]] = &[
    &["asynctask-model"],
    &["asynctask-manager"],
    &["asynctask-tools", "asynctask-store"],
    &["asynctask-runtime", "asynctask-process", "asynctask-fleet"],
    &["asynctask-mcp"],
    &["asynctask-supervisor"],
    &["asynctask-cli"],
    &["asynctask-e2e"],
];

/// The one file allowed to hold unsafe code (the workspace lint is
/// `unsafe_code = "deny"`, which this file's module overrides).
const UNSAFE_ALLOWED: &str = "crates/asynctask-process/src/sys.rs";

/// Members outside the layering that must depend on no member at all.
const STANDALONE: &[&str] = &["xtask", "asynctask-test-support"];

/// Packages a member must not reach through normal dependencies, even
/// indirectly, and why.
const BANNED: &[(&str, &[&str], &str)] = &[
    (
        "asynctask-model",
        &["tokio", "tokio-util"],
        "the model is plain data",
    ),
    (
        "asynctask-manager",
        &["asynctask-store", "rusqlite", "libsqlite3-sys"],
        "the manager holds no database: a store is a journal it is handed",
    ),
    (
        "asynctask-runtime",
        &["asynctask-process", "nix", "toml"],
        "process spawning lives in asynctask-process",
    ),
    (
        "asynctask-runtime",
        &["asynctask-store", "rusqlite", "libsqlite3-sys"],
        "the runtime takes any journal and never depends on a database",
    ),
];

/// Runs every rule and reports every violation at once.
pub(crate) fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    let sources = rust_files(root);
    if sources.is_empty() {
        problems.push("no .rs files found: is the root right?".to_owned());
    }
    for path in &sources {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let relative = path.strip_prefix(root).unwrap_or(path);
        let shown = relative.display();
        problems.extend(
            check_source(&text, relative == Path::new(UNSAFE_ALLOWED))
                .into_iter()
                .chain(check_length(relative, &text))
                .chain(check_doc_blocks(relative, &text))
                .chain(check_plain_data(relative, &text))
                .map(|p| format!("{shown}: {p}")),
        );
    }
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
        .map_err(|err| format!("cannot read ARCHITECTURE.md: {err}"))?;
    problems.extend(check_map(&map).map(|p| format!("ARCHITECTURE.md: {p}")));
    let metadata = cargo_metadata_with(root, &["--all-features"])?;
    for manifest in member_manifests(&metadata) {
        let text = std::fs::read_to_string(&manifest)
            .map_err(|err| format!("cannot read {}: {err}", manifest.display()))?;
        let shown = manifest.strip_prefix(root).unwrap_or(&manifest).display();
        problems.extend(
            check_manifest(&text)
                .into_iter()
                .map(|p| format!("{shown}: {p}")),
        );
    }
    problems.extend(check_layers(&metadata));
    for doc in CRATE_TABLES {
        let text = std::fs::read_to_string(root.join(doc))
            .map_err(|err| format!("cannot read {doc}: {err}"))?;
        problems.extend(
            check_crate_table(&text, &metadata)
                .into_iter()
                .map(|p| format!("{doc}: {p}")),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        ))
    }
}

/// The most lines a source file (under a crate's `src/`) may hold before its
/// unit tests (`#[cfg(test)]`): past it, a file holds more than one concern.
const MAX_SOURCE_LINES: usize = 900;

/// The most lines ARCHITECTURE.md may hold: it is a map, read in one sitting.
const MAX_MAP_LINES: usize = 250;

/// The crate whose sources do no I/O and start no threads: the model is plain
/// data, and its tokio ban alone would not stop `std` doing either.
const PLAIN_DATA: &str = "crates/asynctask-model/src";

/// What [`PLAIN_DATA`] sources must not use.
const IO_AND_THREADS: &[&str] = &[
    "std::fs",
    "std::io",
    "std::net",
    "std::process",
    "std::thread",
];

/// Each line of a [`PLAIN_DATA`] source that uses I/O or threads (comments
/// aside).
fn check_plain_data(relative: &Path, text: &str) -> Vec<String> {
    if !relative.starts_with(PLAIN_DATA) {
        return Vec::new();
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .filter_map(|(number, line)| {
            let used = IO_AND_THREADS.iter().find(|path| line.contains(*path))?;
            Some(format!(
                "line {}: `{used}` in the model, which does no I/O and starts no threads",
                number + 1
            ))
        })
        .collect()
}

/// The most lines one doc comment (a run of `///` or `//!` lines) under `src/`
/// may hold, its example included: a caller reads what they need there, and
/// a manual belongs in the guide.
const MAX_DOC_LINES: usize = 39;

/// Each doc comment under `src/` longer than [`MAX_DOC_LINES`].
fn check_doc_blocks(relative: &Path, text: &str) -> Vec<String> {
    if !relative.components().any(|part| part.as_os_str() == "src") {
        return Vec::new();
    }
    let mut problems = Vec::new();
    // (the marker, the line its run starts on, how long it is)
    let mut run: Option<(&str, usize, usize)> = None;
    for (number, line) in text.lines().chain([""]).enumerate() {
        let trimmed = line.trim_start();
        let marker = ["//!", "///"]
            .into_iter()
            .find(|marker| trimmed.starts_with(marker) && !trimmed.starts_with("////"));
        match (run, marker) {
            (Some((open, start, length)), Some(marker)) if open == marker => {
                run = Some((open, start, length + 1));
            }
            _ => {
                if let Some((_, start, length)) = run
                    && length > MAX_DOC_LINES
                {
                    problems.push(format!(
                        "line {start}: a doc comment of {length} lines, over {MAX_DOC_LINES}: \
                         say what a caller needs, and move the manual to the guide"
                    ));
                }
                run = marker.map(|marker| (marker, number + 1, 1));
            }
        }
    }
    problems
}

/// A source file under `src/` longer than [`MAX_SOURCE_LINES`] before its tests.
fn check_length(relative: &Path, text: &str) -> Option<String> {
    if !relative.components().any(|part| part.as_os_str() == "src") {
        return None;
    }
    let lines = text
        .lines()
        .take_while(|line| line.trim_start() != "#[cfg(test)]")
        .count();
    (lines > MAX_SOURCE_LINES).then(|| {
        format!(
            "{lines} lines before its tests, over {MAX_SOURCE_LINES}: split it by concern \
             into modules"
        )
    })
}

/// ARCHITECTURE.md longer than [`MAX_MAP_LINES`].
fn check_map(text: &str) -> Option<String> {
    let lines = text.lines().count();
    (lines > MAX_MAP_LINES).then(|| {
        format!("{lines} lines, over {MAX_MAP_LINES}: a map says where, the code says how")
    })
}

/// The documents whose crate table (`| \`asynctask-…\` | holds | depends on |`)
/// must say what `cargo metadata` says: every library crate, each with exactly
/// the workspace crates it depends on (short names, `—` for none).
const CRATE_TABLES: &[&str] = &["README.md", "ARCHITECTURE.md"];

/// Where a crate table disagrees with `cargo metadata`.
fn check_crate_table(text: &str, metadata: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let members: BTreeSet<String> = workspace_packages(metadata)
        .map(|pkg| str_field(pkg, "name"))
        .collect();
    let mut listed = BTreeSet::new();
    for row in text
        .lines()
        .filter(|line| line.starts_with("| `asynctask-"))
    {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let name = cells[0].trim_matches('`');
        listed.insert(name.to_owned());
        let Some(pkg) = workspace_packages(metadata).find(|pkg| str_field(pkg, "name") == name)
        else {
            problems.push(format!(
                "the crate table lists {name}, which is not a member"
            ));
            continue;
        };
        let actual: BTreeSet<String> = pkg["dependencies"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|dep| dep["kind"] != "dev")
            .map(|dep| str_field(dep, "name"))
            .filter(|dep| members.contains(dep))
            .map(|dep| dep.trim_start_matches("asynctask-").to_owned())
            .collect();
        let said: BTreeSet<String> = cells
            .last()
            .map(|cell| {
                cell.split(',')
                    .map(str::trim)
                    .filter(|dep| !dep.is_empty() && *dep != "—")
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if said != actual {
            problems.push(format!(
                "the crate table says {name} depends on {said:?}; cargo metadata says {actual:?}"
            ));
        }
    }
    for member in members.iter().filter(|m| {
        m.starts_with("asynctask-") && !STANDALONE.contains(&m.as_str()) && *m != "asynctask-e2e"
    }) {
        if !listed.contains(member) {
            problems.push(format!("the crate table does not list {member}"));
        }
    }
    problems
}

/// The rules for one source file; `unsafe_allowed` for [`UNSAFE_ALLOWED`].
fn check_source(text: &str, unsafe_allowed: bool) -> Vec<String> {
    let mut problems = Vec::new();
    if !text.starts_with("//!") {
        problems.push("must start with a `//!` line saying what the file holds".to_owned());
    }
    // Built at run time so that this file does not trip its own rule.
    let banned = [format!("#[{}", "ignore"), format!("#[{}", "should_panic")];
    for (number, line) in text.lines().enumerate() {
        for needle in &banned {
            if line.trim_start().starts_with(needle.as_str()) {
                problems.push(format!(
                    "line {}: `{needle}]` is not allowed: tests run, and assert on the Err",
                    number + 1
                ));
            }
        }
    }
    problems.extend(check_unsafe(text, unsafe_allowed));
    problems
}

/// Unsafe code: none at all outside [`UNSAFE_ALLOWED`]; there, every
/// `unsafe` block right under a comment block that holds a `// SAFETY:` line.
///
/// The keyword is matched as a whole word (`unsafe{`, `unsafe fn`, `unsafe
/// impl`, `#[unsafe(...)]`, ...) and so is the lint's name (`unsafe_code` in
/// any lint attribute: `allow`, `expect`, `warn`, among other lints), in code
/// only: comments and string and character literals are blanked out first
/// ([`code_only`]), so a word in them is no finding and a keyword hidden
/// after one on the same line still is.
fn check_unsafe(text: &str, unsafe_allowed: bool) -> Vec<String> {
    // Built at run time so that this file does not trip its own rule.
    let keyword = format!("{}{}", "uns", "afe");
    let lint = format!("{keyword}_code");
    let code = code_only(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    for (index, line) in code.lines().enumerate() {
        for word in [&keyword, &lint] {
            for at in word_positions(line, word) {
                if !unsafe_allowed {
                    problems.push(format!(
                        "line {}: `{word}` is allowed only in {UNSAFE_ALLOWED}",
                        index + 1
                    ));
                } else if word == &keyword
                    && line[at + word.len()..].trim_start().starts_with('{')
                    && !has_safety_comment(&lines[..index])
                {
                    problems.push(format!(
                        "line {}: `{keyword} {{` needs a `// SAFETY:` comment right above it",
                        index + 1
                    ));
                }
            }
        }
    }
    problems
}

/// Where `word` stands in `line` as a whole word: not inside a longer
/// identifier (letters, digits and `_` on neither side).
fn word_positions(line: &str, word: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word)
        .filter(|(at, _)| {
            let before = line[..*at].chars().next_back();
            let after = line[at + word.len()..].chars().next();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        })
        .map(|(at, _)| at)
        .collect()
}

/// `text` with every comment (line, block — nested — and doc) and every
/// string, byte string, raw string and character literal replaced by spaces,
/// line breaks kept, so what is left is code on the lines it was on. A
/// lifetime (`'a`) is code.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !i.checked_sub(1).is_some_and(|j| is_ident(chars[j]))
            && raw_string_hashes(&chars[i + usize::from(c == 'b') + 1..]).is_some()
        {
            // r"...", r#"..."#, br"...": no escapes; ends at `"` and the hashes.
            let start = i + usize::from(c == 'b') + 1;
            let hashes = raw_string_hashes(&chars[start..]).unwrap_or(0);
            let body = start + hashes + 1;
            for &skipped in &chars[i..body] {
                blank(&mut out, skipped);
            }
            i = body;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&closing) {
                blank(&mut out, chars[i]);
                i += 1;
            }
            for _ in 0..closing.len().min(chars.len() - i) {
                out.push(' ');
                i += 1;
            }
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
            if i < chars.len() {
                out.push(' ');
                i += 1;
            }
        } else if c == '\'' {
            // A character literal: 'x', '\n', '\u{1f600}', '\''. Anything else
            // after a quote is a lifetime or a label.
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .skip(1)
                    .position(|&c| c == '\'')
                    .map(|at| i + 3 + at)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &skipped in &chars[i..=end] {
                        blank(&mut out, skipped);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// For the text right after a raw string's `r`: how many `#` open it, when
/// they are followed by `"` (else it is no raw string).
fn raw_string_hashes(after_r: &[char]) -> Option<usize> {
    let hashes = after_r.iter().take_while(|&&c| c == '#').count();
    (after_r.get(hashes) == Some(&'"')).then_some(hashes)
}

/// Whether the comment lines right before a line (none between) hold a
/// `// SAFETY:` line.
fn has_safety_comment(before: &[&str]) -> bool {
    before
        .iter()
        .rev()
        .map(|line| line.trim_start())
        .take_while(|line| line.starts_with("//"))
        .any(|line| line.starts_with("// SAFETY:"))
}

/// The rules for one member's Cargo.toml.
fn check_manifest(text: &str) -> Vec<String> {
    let manifest: toml::Table = match toml::from_str(text) {
        Ok(manifest) => manifest,
        Err(err) => return vec![format!("not valid TOML: {err}")],
    };
    let mut problems = Vec::new();
    let lints_inherited = manifest
        .get("lints")
        .and_then(|lints| lints.get("workspace"))
        .and_then(toml::Value::as_bool)
        == Some(true);
    if !lints_inherited {
        problems.push("must have `[lints] workspace = true`".to_owned());
    }
    let mut tables: Vec<(String, &toml::Table)> = Vec::new();
    for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(table) = manifest.get(kind).and_then(toml::Value::as_table) {
            tables.push((kind.to_owned(), table));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for (cfg, target) in targets {
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(table) = target.get(kind).and_then(toml::Value::as_table) {
                    tables.push((format!("target.{cfg}.{kind}"), table));
                }
            }
        }
    }
    for (kind, table) in tables {
        for (name, spec) in table {
            let inherited = spec.get("workspace").and_then(toml::Value::as_bool) == Some(true);
            if !inherited {
                problems.push(format!(
                    "[{kind}] {name} must come from the workspace (`{name}.workspace = true`)"
                ));
            }
        }
    }
    problems
}

/// The layering rules, read from `cargo metadata`.
fn check_layers(metadata: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let members: BTreeMap<String, String> = workspace_packages(metadata)
        .map(|pkg| (str_field(pkg, "id"), str_field(pkg, "name")))
        .collect();
    let member_names: BTreeSet<&str> = members.values().map(String::as_str).collect();
    for pkg in workspace_packages(metadata) {
        let name = str_field(pkg, "name");
        let layer = LAYERS
            .iter()
            .position(|layer| layer.contains(&name.as_str()));
        if layer.is_none() && !STANDALONE.contains(&name.as_str()) {
            problems.push(format!(
                "{name} is not in the layering table of xtask/src/tidy.rs"
            ));
        }
        let deps = pkg["dependencies"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        for dep in deps {
            let dep_name = str_field(dep, "name");
            if !member_names.contains(dep_name.as_str()) || dep["kind"] == "dev" {
                continue;
            }
            let allowed = match layer {
                Some(layer) => LAYERS[..layer]
                    .iter()
                    .any(|below| below.contains(&dep_name.as_str())),
                None => false,
            };
            if !allowed {
                problems.push(format!(
                    "{name} depends on {dep_name}: a crate may depend only on the layers below it"
                ));
            }
        }
    }
    for (member, banned, why) in BANNED {
        let Some(member_id) = members
            .iter()
            .find(|(_, name)| name == member)
            .map(|(id, _)| id)
        else {
            continue;
        };
        let closure = normal_closure(metadata, member_id);
        for banned in *banned {
            if closure
                .iter()
                .any(|id| package_name(metadata, id) == *banned)
            {
                problems.push(format!(
                    "{member} must not depend on {banned}, even indirectly: {why}"
                ));
            }
        }
    }
    problems
}

/// The ids of every package `root` reaches through normal (non-dev, non-build) edges.
fn normal_closure(metadata: &Value, root: &str) -> BTreeSet<String> {
    let nodes: BTreeMap<String, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|node| (str_field(node, "id"), node))
        .collect();
    let mut seen = BTreeSet::new();
    let mut stack = vec![root.to_owned()];
    while let Some(id) = stack.pop() {
        let Some(node) = nodes.get(&id) else { continue };
        for dep in node["deps"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let normal = dep["dep_kinds"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .any(|kind| kind["kind"].is_null());
            let dep_id = str_field(dep, "pkg");
            if normal && seen.insert(dep_id.clone()) {
                stack.push(dep_id);
            }
        }
    }
    seen
}

fn package_name(metadata: &Value, id: &str) -> String {
    metadata["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .find(|pkg| pkg["id"] == id)
        .map(|pkg| str_field(pkg, "name"))
        .unwrap_or_default()
}

fn workspace_packages(metadata: &Value) -> impl Iterator<Item = &Value> {
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    metadata["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(move |pkg| pkg["id"].as_str().is_some_and(|id| members.contains(id)))
}

fn member_manifests(metadata: &Value) -> Vec<PathBuf> {
    workspace_packages(metadata)
        .map(|pkg| PathBuf::from(str_field(pkg, "manifest_path")))
        .collect()
}

fn str_field(value: &Value, field: &str) -> String {
    value[field].as_str().unwrap_or_default().to_owned()
}

/// `cargo metadata --format-version 1` with `extra` arguments, parsed.
pub(crate) fn cargo_metadata_with(root: &Path, extra: &[&str]) -> Result<Value, String> {
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()))
        .args(["metadata", "--format-version", "1"])
        .args(extra)
        .current_dir(root)
        .output()
        .map_err(|err| format!("cannot run cargo metadata: {err}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    serde_json::from_slice(&output.stdout).map_err(|err| format!("cargo metadata: {err}"))
}

/// Every `.rs` file of the project, outside `target/` and hidden directories.
fn rust_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_is_tidy() {
        if let Err(why) = check(&crate::project_root()) {
            panic!("{why}");
        }
    }

    #[test]
    fn long_sources_and_a_long_map_are_reported_tests_and_test_dirs_aside() {
        let body = "//! x\n".to_owned() + &"fn f() {}\n".repeat(MAX_SOURCE_LINES - 1);
        let with_tests = body.clone() + "#[cfg(test)]\n" + &"// t\n".repeat(500);
        let src = Path::new("crates/a/src/lib.rs");
        assert_eq!(check_length(src, &body), None);
        assert_eq!(check_length(src, &with_tests), None);
        let over = body + "fn g() {}\n";
        assert_eq!(
            check_length(src, &over).as_deref(),
            Some("901 lines before its tests, over 900: split it by concern into modules")
        );
        assert_eq!(
            check_length(Path::new("crates/a/tests/it/big.rs"), &over),
            None
        );
        assert_eq!(check_map(&"line\n".repeat(MAX_MAP_LINES)), None);
        let doc = |lines: usize| "/// x\n".repeat(lines);
        assert!(check_doc_blocks(src, &(doc(MAX_DOC_LINES) + "fn f() {}\n")).is_empty());
        assert_eq!(
            check_doc_blocks(src, &format!("//! x\n\n{}", doc(MAX_DOC_LINES + 1))),
            [
                "line 3: a doc comment of 40 lines, over 39: say what a caller needs, and move \
              the manual to the guide"
            ]
        );
        // A module's docs and an item's are two comments, however close.
        let split = "//! x\n".repeat(20) + &doc(30);
        assert!(check_doc_blocks(src, &split).is_empty());
        assert!(check_doc_blocks(Path::new("crates/a/tests/it/x.rs"), &doc(99)).is_empty());
        let model = Path::new("crates/asynctask-model/src/task.rs");
        assert_eq!(
            check_plain_data(model, "//! x\n// std::fs in a comment\nuse std::thread;\n"),
            ["line 3: `std::thread` in the model, which does no I/O and starts no threads"]
        );
        assert!(check_plain_data(src, "use std::thread;\n").is_empty());
        assert!(check_map(&"line\n".repeat(MAX_MAP_LINES + 1)).is_some());
    }

    #[test]
    fn a_file_without_a_header_is_reported() {
        assert_eq!(
            check_source("fn main() {}\n", false),
            ["must start with a `//!` line saying what the file holds"]
        );
    }

    #[test]
    fn skipped_and_panicking_tests_are_reported() {
        let source = format!(
            "//! x\n#[test]\n#[{}]\nfn a() {{}}\n    #[{}(expected = \"x\")]\n",
            "ignore", "should_panic"
        );
        assert_eq!(check_source(&source, false).len(), 2);
    }

    #[test]
    fn unsafe_code_is_reported_outside_its_one_file() {
        let keyword = format!("{}{}", "uns", "afe");
        let source = format!(
            "//! x\n#![allow({keyword}_code)]\nfn a() {{ {keyword} {{ b() }} }}\n{keyword} fn c() {{}}\n{keyword} impl Send for D {{}}\n// a comment saying {keyword} {{ is fine\n"
        );
        assert_eq!(
            check_source(&source, false),
            [
                format!("line 2: `{keyword}_code` is allowed only in {UNSAFE_ALLOWED}"),
                format!("line 3: `{keyword}` is allowed only in {UNSAFE_ALLOWED}"),
                format!("line 4: `{keyword}` is allowed only in {UNSAFE_ALLOWED}"),
                format!("line 5: `{keyword}` is allowed only in {UNSAFE_ALLOWED}"),
            ]
        );
    }

    #[test]
    fn unsafe_code_is_found_however_it_is_spelled() {
        let keyword = format!("{}{}", "uns", "afe");
        let lines = [
            format!("fn a() {{ {keyword}{{ b() }} }}"),
            format!("#![allow(clippy::x, {keyword}_code)]"),
            format!("#[expect({keyword}_code, reason = \"r\")]"),
            format!("#![warn({keyword}_code)]"),
            format!("let s = \"a string\"; {keyword} {{ c() }}"),
            format!("/* a comment */ {keyword} extern \"C\" {{}}"),
            format!("#[{keyword}(no_mangle)]"),
            format!("let c = '\"'; {keyword} {{ d() }}"),
            format!("fn f<'a>(x: &'a str) {{ {keyword} {{ e() }} }}"),
        ];
        for line in &lines {
            let source = format!("//! x\n{line}\n");
            assert_eq!(check_source(&source, false).len(), 1, "{line}");
        }
    }

    #[test]
    fn the_word_in_comments_strings_and_identifiers_is_no_finding() {
        let keyword = format!("{}{}", "uns", "afe");
        let lines = [
            format!("// {keyword} {{ in a comment"),
            format!("/* {keyword} {{ in a\n block {keyword}_code comment */"),
            format!("/* nested /* {keyword} */ still a comment {keyword} */"),
            format!("let s = \"{keyword} {{ in a string\";"),
            format!("let s = \"an escaped \\\" quote, then {keyword}\";"),
            format!("let s = r#\"a raw \"{keyword}\" string\"#;"),
            format!("let s = br\"{keyword}\";"),
            format!("let not_{keyword} = 1; let {keyword}ly = 2;"),
            format!("let c = '{{'; let d = '\\''; let w = \"{keyword}\";"),
        ];
        for line in &lines {
            let source = format!("//! x\n{line}\n");
            assert_eq!(check_source(&source, false), Vec::<String>::new(), "{line}");
        }
    }

    #[test]
    fn manifests_must_inherit_lints_and_dependencies() {
        let manifest = "[package]\nname = \"x\"\n[dependencies]\nserde = \"1\"\nfoo.workspace = true\n[dev-dependencies]\nbar = { workspace = true, features = [\"a\"] }\n";
        assert_eq!(
            check_manifest(manifest),
            [
                "must have `[lints] workspace = true`",
                "[dependencies] serde must come from the workspace (`serde.workspace = true`)",
            ]
        );
        assert!(check_manifest("[lints]\nworkspace = true\n").is_empty());
    }

    #[test]
    fn an_upward_dependency_is_reported() {
        let metadata = serde_json::json!({
            "workspace_members": ["m", "t"],
            "packages": [
                {"id": "m", "name": "asynctask-model", "dependencies": [{"name": "asynctask-tools"}]},
                {"id": "t", "name": "asynctask-tools", "dependencies": [{"name": "asynctask-model"}]},
            ],
            "resolve": {"nodes": []},
        });
        assert_eq!(
            check_layers(&metadata),
            [
                "asynctask-model depends on asynctask-tools: a crate may depend only on the layers below it"
            ]
        );
    }

    #[test]
    fn tokio_under_the_model_is_reported() {
        let metadata = serde_json::json!({
            "workspace_members": ["m"],
            "packages": [
                {"id": "m", "name": "asynctask-model", "dependencies": []},
                {"id": "s", "name": "serde", "dependencies": []},
                {"id": "k", "name": "tokio", "dependencies": []},
            ],
            "resolve": {"nodes": [
                {"id": "m", "deps": [{"pkg": "s", "dep_kinds": [{"kind": null}]}]},
                {"id": "s", "deps": [{"pkg": "k", "dep_kinds": [{"kind": null}]}]},
            ]},
        });
        assert_eq!(
            check_layers(&metadata),
            ["asynctask-model must not depend on tokio, even indirectly: the model is plain data"]
        );
    }

    #[test]
    fn a_database_under_the_runtime_is_reported_but_an_upward_dev_dependency_is_not() {
        let metadata = serde_json::json!({
            "workspace_members": ["r", "s"],
            "packages": [
                {"id": "r", "name": "asynctask-runtime", "dependencies": [{"name": "asynctask-store", "kind": null}]},
                {"id": "s", "name": "asynctask-store", "dependencies": [{"name": "asynctask-runtime", "kind": "dev"}]},
                {"id": "q", "name": "rusqlite", "dependencies": []},
            ],
            "resolve": {"nodes": [
                {"id": "r", "deps": [{"pkg": "s", "dep_kinds": [{"kind": null}]}]},
                {"id": "s", "deps": [
                    {"pkg": "q", "dep_kinds": [{"kind": null}]},
                    {"pkg": "r", "dep_kinds": [{"kind": "dev"}]},
                ]},
            ]},
        });
        assert_eq!(
            check_layers(&metadata),
            [
                "asynctask-runtime must not depend on asynctask-store, even indirectly: the runtime takes any journal and never depends on a database",
                "asynctask-runtime must not depend on rusqlite, even indirectly: the runtime takes any journal and never depends on a database",
            ]
        );
    }

    #[test]
    fn a_crate_table_must_say_what_cargo_metadata_says() {
        let metadata = serde_json::json!({
            "workspace_members": ["m", "n", "t"],
            "packages": [
                {"id": "m", "name": "asynctask-model", "dependencies": []},
                {"id": "n", "name": "asynctask-manager", "dependencies": [{"name": "asynctask-model", "kind": null}]},
                {"id": "t", "name": "asynctask-tools", "dependencies": [
                    {"name": "asynctask-model", "kind": null},
                    {"name": "asynctask-manager", "kind": "dev"},
                    {"name": "serde", "kind": null},
                ]},
            ],
            "resolve": {"nodes": []},
        });
        let table = "| crate | holds | depends on |\n|---|---|---|\n\
                     | `asynctask-model` | data | — |\n\
                     | `asynctask-tools` | tools | model, manager |\n";
        assert_eq!(
            check_crate_table(table, &metadata),
            [
                r#"the crate table says asynctask-tools depends on {"manager", "model"}; cargo metadata says {"model"}"#,
                "the crate table does not list asynctask-manager",
            ]
        );
    }
}
