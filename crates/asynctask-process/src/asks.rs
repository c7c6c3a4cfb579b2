//! Questions from a `stdin = "jsonl"` subagent: it writes one JSON line per
//! question to the FIFO named by `$ASYNCTASK_QUESTIONS`, and reads the answer
//! on its stdin as a `{"type":"answer",…}` line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use asynctask_manager::{Answer, Question, Questions};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc;

/// The variable that names the questions FIFO.
pub(crate) const QUESTIONS_ENV: &str = "ASYNCTASK_QUESTIONS";
/// How long a question waits for its answer when it does not say.
pub(crate) const DEFAULT_QUESTION_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest a question may ask to wait.
const MAX_QUESTION_TIMEOUT: Duration = Duration::from_secs(3600);
/// The longest question line read; a longer one is refused.
const MAX_QUESTION_LINE_BYTES: usize = 64 * 1024;

/// Makes the FIFO at `path`, readable and writable by its owner only (an
/// old one is replaced).
pub(crate) fn make_fifo(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    nix::unistd::mkfifo(
        path,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .map_err(std::io::Error::from)
}

/// Reads questions from the FIFO at `path` until the run ends (the task is
/// aborted), one at a time: each is asked through `questions`, and its answer
/// line goes to `answers` (the stdin writer). The FIFO is opened for reading
/// and writing, so it never reads end-of-file between two writers and never
/// blocks the open.
pub(crate) async fn read_questions(
    path: PathBuf,
    questions: Questions,
    answers: mpsc::UnboundedSender<String>,
) {
    let receiver = match tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&path)
    {
        Ok(receiver) => receiver,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot open the questions FIFO; the subagent's questions go unanswered");
            return;
        }
    };
    let mut lines = BufReader::new(receiver);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut lines)
            .take(MAX_QUESTION_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > MAX_QUESTION_LINE_BYTES && line.last() != Some(&b'\n') {
            // Skip the rest of the over-long line.
            let mut rest = Vec::new();
            let _ = lines.read_until(b'\n', &mut rest).await;
            let refusal = answer_line(
                None,
                &Err(format!(
                    "the question line is longer than {MAX_QUESTION_LINE_BYTES} bytes"
                )),
            );
            if answers.send(refusal).is_err() {
                return;
            }
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let reply = match parse_question(text.trim()) {
            Ok((id, question, timeout)) => {
                let answer = questions.ask_within(question, timeout).await;
                answer_line(id.as_ref(), &Ok(answer))
            }
            Err((id, error)) => answer_line(id.as_ref(), &Err(error)),
        };
        if answers.send(reply).is_err() {
            return;
        }
    }
}

type Parsed = (Option<Value>, Question, Duration);

/// Reads one question line: `{"type":"question","text":…}`, with optional
/// `choices` (strings), `id` (echoed in the answer) and `timeout_seconds`.
fn parse_question(line: &str) -> Result<Parsed, (Option<Value>, String)> {
    let value: Value = serde_json::from_str(line)
        .map_err(|err| (None, format!("the question is not a JSON object: {err}")))?;
    let Value::Object(object) = value else {
        return Err((None, "the question is not a JSON object".to_owned()));
    };
    let id = object.get("id").cloned();
    let fail = |message: &str| (id.clone(), message.to_owned());
    if object.get("type").and_then(Value::as_str) != Some("question") {
        return Err(fail("a question line needs \"type\": \"question\""));
    }
    let text = object
        .get("text")
        .and_then(Value::as_str)
        .filter(|text| !text.trim().is_empty())
        .ok_or_else(|| fail("a question needs a non-blank \"text\""))?;
    let choices = match object.get("choices") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| fail("\"choices\" must be an array of strings"))?,
        Some(_) => return Err(fail("\"choices\" must be an array of strings")),
    };
    let timeout = match object.get("timeout_seconds") {
        None | Some(Value::Null) => DEFAULT_QUESTION_TIMEOUT,
        Some(seconds) => seconds
            .as_u64()
            .filter(|seconds| *seconds > 0)
            .map(|seconds| Duration::from_secs(seconds).min(MAX_QUESTION_TIMEOUT))
            .ok_or_else(|| fail("\"timeout_seconds\" must be a positive integer"))?,
    };
    Ok((id, Question::new(text).with_choices(choices), timeout))
}

/// The answer line, with its `\n`: `{"type":"answer","id":…,"status":…}`
/// with `text` when answered, `error` when the question was refused.
fn answer_line(id: Option<&Value>, answer: &Result<Answer, String>) -> String {
    let mut line = json!({ "type": "answer" });
    if let Some(id) = id {
        line["id"] = id.clone();
    }
    match answer {
        Ok(answer) => {
            line["status"] = json!(answer.status());
            if let Some(text) = answer.text() {
                line["text"] = json!(text);
            }
        }
        Err(error) => {
            line["status"] = json!("invalid");
            line["error"] = json!(error);
        }
    }
    let mut text = line.to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn questions_are_read_strictly_and_answers_echo_the_id() {
        let (id, question, timeout) = parse_question(
            r#"{"type":"question","id":7,"text":"Go on?","choices":["yes","no"],"timeout_seconds":99999}"#,
        )
        .expect("a question");
        assert_eq!(id, Some(json!(7)));
        assert_eq!(question.choices, ["yes", "no"]);
        assert_eq!(timeout, MAX_QUESTION_TIMEOUT);
        assert_eq!(
            answer_line(id.as_ref(), &Ok(Answer::Answered("yes".into()))),
            "{\"type\":\"answer\",\"id\":7,\"status\":\"answered\",\"text\":\"yes\"}\n"
        );
        for (line, error) in [
            (
                "nope",
                "the question is not a JSON object: expected ident at line 1 column 2",
            ),
            ("[1]", "the question is not a JSON object"),
            (
                r#"{"type":"question","text":"  "}"#,
                "a question needs a non-blank \"text\"",
            ),
            (
                r#"{"text":"x"}"#,
                "a question line needs \"type\": \"question\"",
            ),
            (
                r#"{"type":"question","text":"x","choices":[1]}"#,
                "\"choices\" must be an array of strings",
            ),
            (
                r#"{"type":"question","text":"x","timeout_seconds":-1}"#,
                "\"timeout_seconds\" must be a positive integer",
            ),
        ] {
            assert_eq!(
                parse_question(line).map(|_| ()),
                Err((None, error.to_owned())),
                "{line}"
            );
        }
        assert_eq!(
            answer_line(None, &Err("bad".into())),
            "{\"type\":\"answer\",\"status\":\"invalid\",\"error\":\"bad\"}\n"
        );
    }
}
