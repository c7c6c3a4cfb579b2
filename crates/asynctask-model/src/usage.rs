//! What a task cost: tokens, money and the model, as its subagent reported them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a subagent reported it used: input and output tokens, the cost in US
/// dollars, the model. Every field is optional: a subagent reports what it
/// knows.
///
/// A report is the task's **total so far**, not an increment: merging one
/// ([`merge`](Self::merge)) replaces the fields it gives and keeps the others,
/// so a report repeated (a line printed twice, a wrapper that reports at every
/// turn) is never counted twice, and the last report of a run is its total. A
/// runner that learns its usage call by call adds increments instead
/// ([`add`](Self::add)).
///
/// `input_tokens` counts every token the model read, cached ones included;
/// `output_tokens` every token it wrote. The cost is kept in millionths of a
/// dollar ([`cost_micro_usd`](Self::cost_micro_usd)), so sums are exact and
/// values compare equal; its JSON is a number of dollars (`cost_usd`). The
/// JSON leaves out the fields that are absent.
///
/// # Examples
///
/// ```
/// use asynctask_model::TaskUsage;
///
/// let mut usage = TaskUsage::new().with_input_tokens(1_200).with_model("claude-sonnet-4-5");
/// usage.merge(TaskUsage::new().with_input_tokens(3_400).with_output_tokens(560).with_cost_usd(0.0123));
/// assert_eq!(
///     serde_json::to_string(&usage)?,
///     r#"{"input_tokens":3400,"output_tokens":560,"cost_usd":0.0123,"model":"claude-sonnet-4-5"}"#,
/// );
/// let back: TaskUsage = serde_json::from_str(r#"{"output_tokens":7,"cost_usd":1.5}"#)?;
/// assert_eq!((back.output_tokens, back.cost_micro_usd, back.model), (Some(7), Some(1_500_000), None));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TaskUsage {
    /// Tokens the model read, cached ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Tokens the model wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// The cost in millionths of a US dollar; `cost_usd`, in dollars, in
    /// JSON. At most [`MAX_COST_MICRO_USD`](Self::MAX_COST_MICRO_USD) for the
    /// JSON to hold it exactly (what this type makes never exceeds it).
    #[serde(
        default,
        rename = "cost_usd",
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_usd",
        deserialize_with = "deserialize_usd"
    )]
    pub cost_micro_usd: Option<u64>,
    /// The model that did the work (the last one reported, when there were
    /// several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl TaskUsage {
    /// How many characters of a model name are kept: reports come from
    /// subagents, and a name is shown in one line.
    pub const MODEL_CHARS: usize = 100;

    /// The largest cost kept, in millionths of a dollar: a billion dollars.
    /// Up to it, a cost survives its JSON form (a number of dollars) exactly;
    /// larger costs are refused as they are parsed or set, and sums stop
    /// there.
    pub const MAX_COST_MICRO_USD: u64 = 1_000_000_000_000_000;

    /// A usage with nothing reported.
    #[must_use]
    pub fn new() -> Self {
        TaskUsage::default()
    }

    /// Sets the input tokens.
    #[must_use]
    pub fn with_input_tokens(mut self, tokens: u64) -> Self {
        self.input_tokens = Some(tokens);
        self
    }

    /// Sets the output tokens.
    #[must_use]
    pub fn with_output_tokens(mut self, tokens: u64) -> Self {
        self.output_tokens = Some(tokens);
        self
    }

    /// Sets the cost in US dollars, rounded to the millionth. A cost that is
    /// not a finite, non-negative number of dollars up to
    /// [`MAX_COST_MICRO_USD`](Self::MAX_COST_MICRO_USD) millionths leaves the
    /// cost unset.
    ///
    /// ```
    /// use asynctask_model::TaskUsage;
    ///
    /// assert_eq!(TaskUsage::new().with_cost_usd(0.0000125).cost_micro_usd, Some(13));
    /// assert_eq!(TaskUsage::new().with_cost_usd(-1.0).cost_micro_usd, None);
    /// assert_eq!(TaskUsage::new().with_cost_usd(f64::NAN).cost_micro_usd, None);
    /// ```
    #[must_use]
    pub fn with_cost_usd(mut self, cost: f64) -> Self {
        self.cost_micro_usd = micro_usd(cost);
        self
    }

    /// Sets the model, cut to [`MODEL_CHARS`](Self::MODEL_CHARS) characters.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        let mut model = model.into();
        if let Some((cut, _)) = model.char_indices().nth(Self::MODEL_CHARS) {
            model.truncate(cut);
        }
        self.model = Some(model);
        self
    }

    /// The cost in US dollars.
    ///
    /// ```
    /// use asynctask_model::TaskUsage;
    ///
    /// assert_eq!(TaskUsage::new().with_cost_usd(0.25).cost_usd(), Some(0.25));
    /// ```
    #[must_use]
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost_micro_usd.map(dollars)
    }

    /// Whether nothing was reported.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self == &TaskUsage::default()
    }

    /// Takes a report of the total so far: each field it gives replaces this
    /// one's, the others stay.
    ///
    /// ```
    /// use asynctask_model::TaskUsage;
    ///
    /// let mut usage = TaskUsage::new().with_input_tokens(10).with_model("m");
    /// usage.merge(TaskUsage::new().with_input_tokens(25).with_output_tokens(3));
    /// assert_eq!(usage, TaskUsage::new().with_input_tokens(25).with_output_tokens(3).with_model("m"));
    /// ```
    pub fn merge(&mut self, report: TaskUsage) {
        let TaskUsage {
            input_tokens,
            output_tokens,
            cost_micro_usd,
            model,
        } = report;
        self.input_tokens = input_tokens.or(self.input_tokens);
        self.output_tokens = output_tokens.or(self.output_tokens);
        self.cost_micro_usd = cost_micro_usd.or(self.cost_micro_usd);
        if model.is_some() {
            self.model = model;
        }
    }

    /// Adds an increment: tokens and cost are summed (saturating), a field
    /// only one side has is kept; the increment's model, if it names one,
    /// replaces this one's.
    ///
    /// ```
    /// use asynctask_model::TaskUsage;
    ///
    /// let mut usage = TaskUsage::new().with_input_tokens(10).with_cost_usd(0.5);
    /// usage.add(&TaskUsage::new().with_input_tokens(5).with_output_tokens(2).with_cost_usd(0.25));
    /// assert_eq!(usage, TaskUsage::new().with_input_tokens(15).with_output_tokens(2).with_cost_usd(0.75));
    /// ```
    pub fn add(&mut self, increment: &TaskUsage) {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        self.input_tokens = sum(self.input_tokens, increment.input_tokens);
        self.output_tokens = sum(self.output_tokens, increment.output_tokens);
        self.cost_micro_usd = sum(self.cost_micro_usd, increment.cost_micro_usd)
            .map(|cost| cost.min(Self::MAX_COST_MICRO_USD));
        if increment.model.is_some() {
            self.model.clone_from(&increment.model);
        }
    }
}

/// Millionths of a dollar in dollars. Up to [`TaskUsage::MAX_COST_MICRO_USD`]
/// (below 2^30 dollars) the result is within a quarter of a millionth of
/// the exact value, so [`micro_usd`] recovers the count.
#[expect(
    clippy::cast_precision_loss,
    reason = "a cost beyond 2^53 millionths of a dollar is shown rounded"
)]
fn dollars(micros: u64) -> f64 {
    micros as f64 / 1e6
}

/// `amount` dollars in millionths of a dollar, when it is a finite,
/// non-negative number of them up to [`TaskUsage::MAX_COST_MICRO_USD`].
fn micro_usd(amount: f64) -> Option<u64> {
    let micros = (amount * 1e6).round();
    if !(micros.is_finite()
        && micros >= 0.0
        && micros <= dollars(TaskUsage::MAX_COST_MICRO_USD) * 1e6)
    {
        return None;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked just above: finite, non-negative, at most a billion dollars"
    )]
    let micros = micros as u64;
    Some(micros)
}

#[expect(
    clippy::ref_option,
    reason = "serde's serialize_with passes the field by reference"
)]
fn serialize_usd<S: Serializer>(micros: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
    match micros {
        Some(micros) => serializer.serialize_f64(dollars(*micros)),
        None => serializer.serialize_none(),
    }
}

fn deserialize_usd<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Option::<f64>::deserialize(deserializer)? {
        None => Ok(None),
        Some(dollars) => micro_usd(dollars).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "cost_usd must be a non-negative number of dollars, not {dollars}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn costs_round_trip_through_json_as_dollars() {
        for micros in [
            0,
            1,
            12_300,
            999_999,
            1_000_000,
            123_456_789_012,
            TaskUsage::MAX_COST_MICRO_USD,
        ] {
            let usage = TaskUsage {
                cost_micro_usd: Some(micros),
                ..TaskUsage::default()
            };
            let json = serde_json::to_string(&usage).unwrap();
            let back: TaskUsage = serde_json::from_str(&json).unwrap();
            assert_eq!(back, usage, "{json}");
        }
        let usage: TaskUsage = serde_json::from_str(r#"{"cost_usd":0.0123}"#).unwrap();
        assert_eq!(usage.cost_micro_usd, Some(12_300));
        assert_eq!(
            serde_json::to_string(&usage).unwrap(),
            r#"{"cost_usd":0.0123}"#
        );
    }

    #[test]
    fn every_cost_up_to_the_maximum_survives_json() {
        let mut micros = 1;
        while micros < TaskUsage::MAX_COST_MICRO_USD {
            for cost in [
                micros - 1,
                micros,
                micros + 1,
                TaskUsage::MAX_COST_MICRO_USD - micros,
            ] {
                let usage = TaskUsage {
                    cost_micro_usd: Some(cost),
                    ..TaskUsage::default()
                };
                let json = serde_json::to_string(&usage).unwrap();
                assert_eq!(
                    serde_json::from_str::<TaskUsage>(&json).unwrap(),
                    usage,
                    "{json}"
                );
            }
            micros = micros * 3 + 7;
        }
    }

    #[test]
    fn bad_costs_and_tokens_are_refused() {
        for bad in [
            r#"{"cost_usd":-0.5}"#,
            r#"{"cost_usd":1e300}"#,
            r#"{"cost_usd":1000000000.000001}"#,
            r#"{"cost_usd":"0.5"}"#,
            r#"{"input_tokens":-1}"#,
            r#"{"input_tokens":1.5}"#,
            r#"{"output_tokens":18446744073709551616}"#,
        ] {
            assert!(serde_json::from_str::<TaskUsage>(bad).is_err(), "{bad}");
        }
        let nulls: TaskUsage =
            serde_json::from_str(r#"{"input_tokens":null,"cost_usd":null,"model":null}"#).unwrap();
        assert!(nulls.is_empty());
    }

    #[test]
    fn a_long_model_name_is_cut() {
        let usage = TaskUsage::new().with_model("é".repeat(500));
        assert_eq!(
            usage.model.map(|model| model.chars().count()),
            Some(TaskUsage::MODEL_CHARS)
        );
    }

    #[test]
    fn sums_saturate() {
        let mut usage = TaskUsage::new()
            .with_input_tokens(u64::MAX)
            .with_cost_usd(900_000_000.0);
        usage.add(
            &TaskUsage::new()
                .with_input_tokens(1)
                .with_cost_usd(900_000_000.0),
        );
        assert_eq!(
            (usage.input_tokens, usage.cost_micro_usd),
            (Some(u64::MAX), Some(TaskUsage::MAX_COST_MICRO_USD))
        );
    }
}
