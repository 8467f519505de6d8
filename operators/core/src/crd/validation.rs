//! Admission rules every Quorum custom resource shares, defined once: the patterns of names,
//! label values and quantities, the cron schedule rule and the checks of a container's resource
//! requirements. Each engine's `crd.rs` attaches them to its fields; the shared fragments in
//! [`crate::crd`] carry them already.
//!
//! Patterns are plain schema `pattern`s where a pattern suffices (they cost the API server
//! nothing to evaluate and its message names the field); CEL rules are used where a readable
//! message matters (the schedule) or where a pattern cannot reach (map keys, comparisons).
//! Every CEL rule here runs on values with a bounded size, so the API server accepts its
//! estimated cost.
//!
//! Patterns use RE2 syntax, which both the API server and the `regex` crate accept, and contain
//! neither quotes nor backslashes, so they can be embedded in CEL string literals unchanged.

use std::sync::LazyLock;

use kube::core::{Message, Rule};
use schemars::Schema;
use serde_json::{Value, json};

/// A DNS-1123 subdomain: the name of a Secret, a StorageClass, a PriorityClass or a custom
/// resource. At most [`MAX_OBJECT_NAME`] characters.
pub const DNS_SUBDOMAIN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// The longest DNS-1123 subdomain, and so the longest object name.
pub const MAX_OBJECT_NAME: u32 = 253;

/// A DNS-1035 label: the name of a Service, and of a cluster whose Services, StatefulSets and
/// pods are named after it.
pub const DNS_1035_LABEL: &str = "^[a-z]([-a-z0-9]*[a-z0-9])?$";

/// A label value: at most [`MAX_LABEL_VALUE`] characters, empty or starting and ending with a
/// letter or digit, with `-`, `_` and `.` between.
pub const LABEL_VALUE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// The longest label value.
pub const MAX_LABEL_VALUE: u32 = 63;

/// A label or annotation key: an optional DNS subdomain prefix and `/`, then a name of at most
/// 63 characters starting and ending with a letter or digit.
pub const QUALIFIED_NAME: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A resource quantity that is not negative, as Kubernetes writes it: `500m`, `1Gi`, `2`, `1e3`.
pub const QUANTITY: &str = "^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$";

/// A resource quantity greater than zero: a volume of no bytes cannot be provisioned.
pub const POSITIVE_QUANTITY: &str = "^[+]?([0-9]*[1-9][0-9]*([.][0-9]*)?|[0-9]*[.][0-9]*[1-9][0-9]*)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$";

/// A container image reference: no whitespace, at most [`MAX_IMAGE`] characters.
pub const IMAGE: &str = "^[^ \t\r\n]+$";

/// The longest image reference accepted.
pub const MAX_IMAGE: u32 = 512;

/// The longest cron schedule accepted.
pub const MAX_SCHEDULE: u32 = 128;

/// The values of the five fields, in order: minute 0-59, hour 0-23, day of month 1-31, month
/// 1-12 or `JAN`-`DEC`, day of week 0-7 (0 and 7 are Sunday) or `SUN`-`SAT`.
const CRON_FIELD_VALUES: [&str; 5] = [
    "[0-5]?[0-9]",
    "[01]?[0-9]|2[0-3]",
    "0?[1-9]|[12][0-9]|3[01]",
    "0?[1-9]|1[0-2]|(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)",
    "[0-7]|(?i:sun|mon|tue|wed|thu|fri|sat)",
];

/// The pattern of a five-field cron schedule: each field a comma-separated list of `*`, a
/// value or a range `a-b`, `*` and ranges optionally with a step `/n`; fields separated by
/// spaces.
/// `L`, `W`, `#`, `?` and `@` nicknames are not part of it.
pub fn cron_pattern() -> &'static str {
    static PATTERN: LazyLock<String> = LazyLock::new(|| {
        let fields: Vec<String> = CRON_FIELD_VALUES
            .iter()
            .map(|values| {
                let value = format!("({values})");
                let item = format!("(([*]|{value}-{value})(/[1-9][0-9]?)?|{value})");
                format!("{item}(,{item})*")
            })
            .collect();
        format!("^ *{} *$", fields.join(" +"))
    });
    &PATTERN
}

/// Whether the schedule rule admits `schedule`: [`cron_pattern`] matches and every numeric
/// range ascends (`10-30`, not `30-10`). The operator's own check of a stored schedule, the
/// same as the API server's.
pub fn schedule_admitted(schedule: &str) -> bool {
    static PATTERN: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(cron_pattern()).expect("the cron pattern compiles"));
    static RANGE: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(NUMERIC_RANGE).expect("the range pattern compiles"));
    PATTERN.is_match(schedule)
        && RANGE.find_iter(schedule).all(|range| {
            let (start, end) = range.as_str().split_once('-').expect("a range has a dash");
            start.parse::<u32>().ok() <= end.parse::<u32>().ok()
        })
}

/// A numeric range within a schedule field.
const NUMERIC_RANGE: &str = "[0-9]+-[0-9]+";

/// The admission rule of a cron schedule field (which must have a `maxLength`): five fields,
/// each within its range, as [`schedule_admitted`] checks.
pub fn schedule_rule() -> Rule {
    Rule::new(format!(
        "self.matches('{}') && self.findAll('{NUMERIC_RANGE}').all(range, \
         int(range.split('-')[0]) <= int(range.split('-')[1]))",
        cron_pattern()
    ))
    .message(Message::Message(
        "must be a cron schedule of five fields separated by spaces: minute 0-59, hour 0-23, day of month 1-31, \
         month 1-12 or JAN-DEC, day of week 0-7 or SUN-SAT; each field *, a value, an ascending range a-b or a \
         list of them, * and ranges optionally with a step /n"
            .to_string(),
    ))
}

/// A CEL expression of the version `major.minor.patch` that `expression` evaluates to, as
/// `major * 1000000 + minor * 1000 + patch`, so versions compare as numbers. The rule using it
/// must first check that the version has three numeric parts.
pub fn cel_version_number(expression: &str) -> String {
    format!(
        "(int({expression}.split('.')[0]) * 1000000 + int({expression}.split('.')[1]) * 1000 \
         + int({expression}.split('.')[2]))"
    )
}

/// A CEL expression of the release (`major.minor`) of the version `expression` evaluates to, as
/// `major * 1000 + minor`.
pub fn cel_release_number(expression: &str) -> String {
    format!("(int({expression}.split('.')[0]) * 1000 + int({expression}.split('.')[1]))")
}

/// A schema transform for a field holding a container's `ResourceRequirements`: every value
/// of `limits` and `requests` must be a quantity that is not negative, names must be resources
/// a container can have (`cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>` or a
/// domain-prefixed extended resource), and a request may not exceed its limit. Use it as
/// `#[schemars(transform = quorum_core::crd::validation::resource_requirements)]`.
pub fn resource_requirements(schema: &mut Schema) {
    let Some(object) = object_with_properties(schema) else {
        return;
    };
    let properties = object
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .expect("checked above");
    for list in ["limits", "requests"] {
        if let Some(Value::Object(list_schema)) = properties.get_mut(list) {
            list_schema.insert("maxProperties".into(), json!(16));
            if let Some(Value::Object(values)) = list_schema.get_mut("additionalProperties") {
                values.insert("pattern".into(), json!(QUANTITY));
                values.insert("maxLength".into(), json!(64));
            }
        }
    }
    let names = |list: &str| {
        json!({
            "rule": format!(
                "!has(self.{list}) || self.{list}.all(name, name in ['cpu', 'memory', 'ephemeral-storage'] \
                 || name.startsWith('hugepages-') || name.contains('/'))"
            ),
            "message": format!(
                "{list}: a container's resources are cpu, memory, ephemeral-storage, hugepages-<size> \
                 or a domain-prefixed extended resource"
            ),
            "fieldPath": format!(".{list}"),
        })
    };
    let rules = vec![
        names("limits"),
        names("requests"),
        json!({
            "rule": "!has(self.limits) || !has(self.requests) || self.requests.all(name, !(name in self.limits) \
                     || quantity(string(self.requests[name])).compareTo(quantity(string(self.limits[name]))) <= 0)",
            "message": "requests: a request may not exceed its limit",
            "fieldPath": ".requests",
        }),
    ];
    match object.get_mut("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing.extend(rules),
        _ => {
            object.insert("x-kubernetes-validations".into(), Value::Array(rules));
        }
    }
}

/// A schema transform for a map whose keys are label keys and whose values are label values
/// (pod labels, a node selector): at most 64 entries, values as [`LABEL_VALUE`], keys as
/// [`QUALIFIED_NAME`].
pub fn label_map(schema: &mut Schema) {
    string_map(schema, Some((LABEL_VALUE, MAX_LABEL_VALUE)), "label keys");
}

/// A schema transform for a map of annotations: at most 64 entries, keys as [`QUALIFIED_NAME`].
pub fn annotation_map(schema: &mut Schema) {
    string_map(schema, None, "annotation keys");
}

fn string_map(schema: &mut Schema, values: Option<(&str, u32)>, what: &str) {
    let Some(object) = object_schema(schema) else {
        return;
    };
    object.insert("maxProperties".into(), json!(64));
    if let Some((pattern, max)) = values
        && let Some(Value::Object(value_schema)) = object.get_mut("additionalProperties")
    {
        value_schema.insert("pattern".into(), json!(pattern));
        value_schema.insert("maxLength".into(), json!(max));
    }
    let rule = json!({
        "rule": format!("self.all(key, size(key) <= 317 && key.matches('{QUALIFIED_NAME}'))"),
        "message": format!(
            "{what} are an optional DNS subdomain prefix and '/', then a name of at most 63 letters, digits, \
             '-', '_' and '.', starting and ending with a letter or digit"
        ),
    });
    match object.get_mut("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing.push(rule),
        _ => {
            object.insert("x-kubernetes-validations".into(), json!([rule]));
        }
    }
}

/// A schema transform for a list of pod tolerations: at most 32, each with an operator
/// `Exists` or `Equal` and an effect `NoSchedule`, `PreferNoSchedule` or `NoExecute` when set,
/// and no value with `Exists`.
pub fn tolerations(schema: &mut Schema) {
    let Some(object) = array_schema(schema) else {
        return;
    };
    object.insert("maxItems".into(), json!(32));
    if let Some(Value::Object(item)) = object.get_mut("items")
        && let Some(Value::Object(properties)) = item.get_mut("properties")
    {
        for (field, values) in [
            ("operator", json!(["Exists", "Equal"])),
            ("effect", json!(["NoSchedule", "PreferNoSchedule", "NoExecute"])),
        ] {
            if let Some(Value::Object(field_schema)) = properties.get_mut(field) {
                field_schema.insert("enum".into(), values);
            }
        }
        if let Some(Value::Object(key)) = properties.get_mut("key") {
            key.insert("maxLength".into(), json!(317));
        }
        if let Some(Value::Object(value)) = properties.get_mut("value") {
            value.insert("pattern".into(), json!(LABEL_VALUE));
            value.insert("maxLength".into(), json!(MAX_LABEL_VALUE));
        }
    }
    let rule = json!({
        "rule": "self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",
        "message": "a toleration with operator Exists has no value",
    });
    object.insert("x-kubernetes-validations".into(), json!([rule]));
}

/// The schema object that has `properties`: the schema itself, or the non-null branch of an
/// optional field's `anyOf`.
fn object_with_properties(schema: &mut Schema) -> Option<&mut serde_json::Map<String, Value>> {
    find_schema(schema, "properties")
}

/// The schema object of a map (with `additionalProperties`).
fn object_schema(schema: &mut Schema) -> Option<&mut serde_json::Map<String, Value>> {
    find_schema(schema, "additionalProperties")
}

/// The schema object of a list (with `items`).
fn array_schema(schema: &mut Schema) -> Option<&mut serde_json::Map<String, Value>> {
    find_schema(schema, "items")
}

/// The schema object holding `keyword`: the schema itself or one branch of its `anyOf`,
/// `oneOf` or `allOf` (an optional field's schema before the CRD is made structural).
fn find_schema<'a>(schema: &'a mut Schema, keyword: &str) -> Option<&'a mut serde_json::Map<String, Value>> {
    let object = schema.as_object_mut()?;
    if object.contains_key(keyword) {
        return Some(object);
    }
    let (combinator, index) = ["anyOf", "oneOf", "allOf"].iter().find_map(|combinator| {
        let branches = object.get(*combinator)?.as_array()?;
        let index = branches.iter().position(|branch| {
            branch
                .as_object()
                .is_some_and(|branch| branch.contains_key(keyword))
        })?;
        Some((*combinator, index))
    })?;
    object
        .get_mut(combinator)?
        .as_array_mut()?
        .get_mut(index)?
        .as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{ScheduleError, next_due};

    /// Schedules the schema's rule accepts.
    const VALID_SCHEDULES: &[&str] = &[
        "* * * * *",
        "0 */6 * * *",
        "59 23 31 12 7",
        "0 0 1 1 0",
        "0,15,30,45 * * * *",
        "0-30/5 9-17 * * 1-5",
        "30 2 * * MON",
        "30 2 * * mon-fri",
        "0 0 1 JAN,jul *",
        "0 0 * * SUN",
        " 0 3 * * * ",
        "*/60 * * * *",
        "10-30 * * * *",
        "0 0 * * 0-7",
        "0 0 * * SAT-SUN",
        "0 0 * * 7",
        "00 03 01 01 *",
        "*/59 */23 */31 */12 */7",
    ];

    /// Schedules the schema's rule refuses: a field out of its range, not five fields, or a
    /// syntax outside the common subset.
    const INVALID_SCHEDULES: &[&str] = &[
        "",
        "* * * *",
        "0 * * * * *",
        "@daily",
        "60 * * * *",
        "* 24 * * *",
        "* * 0 * *",
        "* * 32 * *",
        "* * * 0 *",
        "* * * 13 *",
        "* * * * 8",
        "*/0 * * * *",
        "5/15 * * * *",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * 1#2",
        "0 0 ? * *",
        "a b c d e",
        "0 0 * * MONDAY",
        "0 0 * FEB-X *",
        "0\t0 * * *",
        "-1 * * * *",
        "30-10 * * * *",
        "0 0 * * 6-0",
        "1- * * * *",
        ",1 * * * *",
    ];

    #[test]
    fn the_schedule_rule_and_the_operators_parser_agree() {
        let after = "2026-11-21T00:00:00Z".parse().unwrap();
        for schedule in VALID_SCHEDULES {
            assert!(schedule_admitted(schedule), "{schedule:?}: the rule refuses it");
            assert!(
                next_due(schedule, after).is_ok(),
                "{schedule:?}: the parser refuses it: {:?}",
                next_due(schedule, after)
            );
        }
        for schedule in INVALID_SCHEDULES {
            assert!(!schedule_admitted(schedule), "{schedule:?}: the rule accepts it");
            assert!(
                matches!(next_due(schedule, after), Err(ScheduleError::Invalid { .. })),
                "{schedule:?}: the parser accepts it"
            );
        }
    }

    #[test]
    fn patterns_embed_in_cel_string_literals() {
        for pattern in [cron_pattern(), DNS_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME] {
            assert!(!pattern.contains('\'') && !pattern.contains('\\'), "{pattern}");
        }
    }

    #[test]
    fn quantities_are_recognised() {
        let quantity = regex::Regex::new(QUANTITY).unwrap();
        let positive = regex::Regex::new(POSITIVE_QUANTITY).unwrap();
        for valid in ["1Gi", "500m", "2", "1.5", "0.5Gi", "1e3", "100M", "+1Ki"] {
            assert!(quantity.is_match(valid), "{valid}");
            assert!(positive.is_match(valid), "{valid}");
        }
        for zero in ["0", "0Gi", "0.0", ".0"] {
            assert!(quantity.is_match(zero), "{zero}");
            assert!(!positive.is_match(zero), "{zero}");
        }
        for invalid in ["", "-1Gi", "1 Gi", "1GB", "Gi", "1.2.3", "one"] {
            assert!(!quantity.is_match(invalid), "{invalid}");
            assert!(!positive.is_match(invalid), "{invalid}");
        }
    }

    #[test]
    fn names_and_label_values_follow_kubernetes() {
        let subdomain = regex::Regex::new(DNS_SUBDOMAIN).unwrap();
        let label_value = regex::Regex::new(LABEL_VALUE).unwrap();
        let qualified = regex::Regex::new(QUALIFIED_NAME).unwrap();
        let service = regex::Regex::new(DNS_1035_LABEL).unwrap();
        for valid in ["s3-credentials", "a", "tls.example.com", "0abc"] {
            assert!(subdomain.is_match(valid), "{valid}");
        }
        for invalid in ["", "S3", "a_b", "-a", "a-", "a..b", "a b"] {
            assert!(!subdomain.is_match(invalid), "{invalid}");
        }
        for valid in ["", "v1", "a.b_c-d", "A"] {
            assert!(label_value.is_match(valid), "{valid}");
        }
        for invalid in ["-a", "a-", "a/b", "a b"] {
            assert!(!label_value.is_match(invalid), "{invalid}");
        }
        for valid in ["app", "example.com/team", "app.kubernetes.io/name", "A_b"] {
            assert!(qualified.is_match(valid), "{valid}");
        }
        for invalid in ["", "/a", "a/", "Example.com/a", "a/b/c", "-a"] {
            assert!(!qualified.is_match(invalid), "{invalid}");
        }
        for valid in ["main", "a", "shop-1"] {
            assert!(service.is_match(valid), "{valid}");
        }
        for invalid in ["1main", "a.b", "a-", "Main"] {
            assert!(!service.is_match(invalid), "{invalid}");
        }
    }
}
