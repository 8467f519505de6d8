//! The query subset: BSON ordering, filters, sorts, projections and the aggregation stages the
//! driver's helpers send (`countDocuments` is `$match` + `$group {_id: 1, n: {$sum: 1}}`).
//! Anything outside the subset is refused with the server's error, never silently ignored.

use std::cmp::Ordering;

use bson::{Bson, Document, doc};

use super::CmdError;

/// MongoDB's order of types (the "BSON comparison order").
fn type_rank(value: &Bson) -> u8 {
    match value {
        Bson::MinKey => 0,
        Bson::Null | Bson::Undefined => 1,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 2,
        Bson::Symbol(_) | Bson::String(_) => 3,
        Bson::Document(_) => 4,
        Bson::Array(_) => 5,
        Bson::Binary(_) => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Timestamp(_) => 10,
        Bson::RegularExpression(_) => 11,
        Bson::MaxKey => 13,
        _ => 12,
    }
}

fn as_f64(value: &Bson) -> Option<f64> {
    match value {
        Bson::Int32(v) => Some(*v as f64),
        Bson::Int64(v) => Some(*v as f64),
        Bson::Double(v) => Some(*v),
        _ => None,
    }
}

/// Total order over values as the server sorts them (numbers by value across types).
pub fn compare(a: &Bson, b: &Bson) -> Ordering {
    let (ra, rb) = (type_rank(a), type_rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => x.cmp(y),
        (Bson::Int64(x), Bson::Int64(y)) => x.cmp(y),
        _ if ra == 2 => {
            let (x, y) = (as_f64(a).unwrap_or(f64::NAN), as_f64(b).unwrap_or(f64::NAN));
            x.partial_cmp(&y).unwrap_or(Ordering::Equal)
        }
        (Bson::String(x), Bson::String(y)) => x.cmp(y),
        (Bson::Symbol(x), Bson::Symbol(y)) => x.cmp(y),
        (Bson::Document(x), Bson::Document(y)) => {
            for ((kx, vx), (ky, vy)) in x.iter().zip(y.iter()) {
                let by_value = compare(vx, vy);
                if by_value != Ordering::Equal {
                    return by_value;
                }
                let by_key = kx.cmp(ky);
                if by_key != Ordering::Equal {
                    return by_key;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::Array(x), Bson::Array(y)) => {
            for (vx, vy) in x.iter().zip(y.iter()) {
                let order = compare(vx, vy);
                if order != Ordering::Equal {
                    return order;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::Binary(x), Bson::Binary(y)) => (x.bytes.len(), u8::from(x.subtype), &x.bytes).cmp(&(
            y.bytes.len(),
            u8::from(y.subtype),
            &y.bytes,
        )),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => (x.time, x.increment).cmp(&(y.time, y.increment)),
        _ => Ordering::Equal,
    }
}

pub fn equal(a: &Bson, b: &Bson) -> bool {
    compare(a, b) == Ordering::Equal
}

/// The value at a dotted path, when every step is a document.
pub fn lookup<'a>(document: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let mut value = document.get(parts.next()?)?;
    for part in parts {
        value = match value {
            Bson::Document(inner) => inner.get(part)?,
            _ => return None,
        };
    }
    Some(value)
}

fn bad_value(message: impl Into<String>) -> CmdError {
    CmdError::new(2, message)
}

/// Whether `document` matches `filter` (equality, `$eq $ne $gt $gte $lt $lte $in $nin
/// $exists`, `$and $or $nor`; arrays match when an element does, as on the server).
pub fn matches(document: &Document, filter: &Document) -> Result<bool, CmdError> {
    for (key, condition) in filter {
        let matched = match key.as_str() {
            "$and" | "$or" | "$nor" => {
                let clauses = condition
                    .as_array()
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| bad_value(format!("{key} argument must be a non-empty array")))?;
                let mut results = Vec::with_capacity(clauses.len());
                for clause in clauses {
                    let clause = clause
                        .as_document()
                        .ok_or_else(|| bad_value(format!("{key} argument's entries must be objects")))?;
                    results.push(matches(document, clause)?);
                }
                match key.as_str() {
                    "$and" => results.iter().all(|r| *r),
                    "$or" => results.iter().any(|r| *r),
                    _ => !results.iter().any(|r| *r),
                }
            }
            other if other.starts_with('$') => {
                return Err(bad_value(format!("unknown top level operator: {other}")));
            }
            path => field_matches(lookup(document, path), condition)?,
        };
        if !matched {
            return Ok(false);
        }
    }
    Ok(true)
}

fn is_operator_document(condition: &Bson) -> Option<&Document> {
    condition
        .as_document()
        .filter(|d| d.keys().next().is_some_and(|k| k.starts_with('$')))
}

fn value_equals(value: Option<&Bson>, wanted: &Bson) -> bool {
    match value {
        None => matches!(wanted, Bson::Null),
        Some(Bson::Array(items)) if !matches!(wanted, Bson::Array(_)) => {
            items.iter().any(|i| equal(i, wanted))
        }
        Some(Bson::Array(items)) => {
            equal(&Bson::Array(items.clone()), wanted) || items.iter().any(|i| equal(i, wanted))
        }
        Some(value) => equal(value, wanted),
    }
}

fn value_compares(value: Option<&Bson>, wanted: &Bson, accept: fn(Ordering) -> bool) -> bool {
    let candidates: Vec<&Bson> = match value {
        None => return false,
        Some(Bson::Array(items)) => items.iter().collect(),
        Some(value) => vec![value],
    };
    // As on the server, range operators only compare within one type bracket.
    candidates
        .into_iter()
        .any(|v| type_rank(v) == type_rank(wanted) && accept(compare(v, wanted)))
}

fn field_matches(value: Option<&Bson>, condition: &Bson) -> Result<bool, CmdError> {
    let Some(operators) = is_operator_document(condition) else {
        return Ok(value_equals(value, condition));
    };
    for (operator, argument) in operators {
        let matched = match operator.as_str() {
            "$eq" => value_equals(value, argument),
            "$ne" => !value_equals(value, argument),
            "$gt" => value_compares(value, argument, |o| o == Ordering::Greater),
            "$gte" => value_compares(value, argument, |o| o != Ordering::Less),
            "$lt" => value_compares(value, argument, |o| o == Ordering::Less),
            "$lte" => value_compares(value, argument, |o| o != Ordering::Greater),
            "$in" | "$nin" => {
                let options = argument
                    .as_array()
                    .ok_or_else(|| bad_value(format!("{operator} needs an array")))?;
                let any = options.iter().any(|o| value_equals(value, o));
                if operator == "$in" { any } else { !any }
            }
            "$exists" => {
                let wanted = match argument {
                    Bson::Boolean(b) => *b,
                    other => as_f64(other).is_some_and(|n| n != 0.0),
                };
                value.is_some() == wanted
            }
            other => return Err(bad_value(format!("unknown operator: {other}"))),
        };
        if !matched {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Sorts by a sort specification (`{field: 1 | -1, ...}`).
pub fn sort(documents: &mut [Document], specification: &Document) -> Result<(), CmdError> {
    let mut keys = Vec::new();
    for (field, direction) in specification {
        let direction = match as_f64(direction) {
            Some(1.0) => Ordering::Less,
            Some(-1.0) => Ordering::Greater,
            _ => {
                return Err(bad_value(format!(
                    "$sort key ordering must be 1 (for ascending) or -1 (for descending): {field}"
                )));
            }
        };
        keys.push((field.clone(), direction));
    }
    documents.sort_by(|a, b| {
        for (field, direction) in &keys {
            let (x, y) = (
                lookup(a, field).cloned().unwrap_or(Bson::Null),
                lookup(b, field).cloned().unwrap_or(Bson::Null),
            );
            let order = compare(&x, &y);
            if order != Ordering::Equal {
                return if *direction == Ordering::Less {
                    order
                } else {
                    order.reverse()
                };
            }
        }
        Ordering::Equal
    });
    Ok(())
}

/// Applies an inclusion or exclusion projection of top-level fields.
pub fn project(document: &Document, projection: &Document) -> Result<Document, CmdError> {
    let truthy = |v: &Bson| match v {
        Bson::Boolean(b) => Ok(*b),
        other => as_f64(other)
            .map(|n| n != 0.0)
            .ok_or_else(|| bad_value("only inclusion and exclusion projections are supported")),
    };
    let mut inclusion = None;
    for (field, value) in projection {
        if field == "_id" {
            continue;
        }
        let include = truthy(value)?;
        if inclusion.is_some_and(|i| i != include) {
            return Err(CmdError::new(
                31254,
                format!("Cannot do exclusion on field {field} in inclusion projection"),
            ));
        }
        inclusion = Some(include);
    }
    let keep_id = match projection.get("_id") {
        Some(value) => truthy(value)?,
        None => true,
    };
    let mut projected = Document::new();
    for (field, value) in document {
        let keep = if field == "_id" {
            keep_id
        } else {
            match (inclusion, projection.get(field)) {
                (Some(true), Some(_)) => true,
                (Some(true), None) => false,
                (Some(false), Some(_)) => false,
                (_, _) => true,
            }
        };
        if keep {
            projected.insert(field.clone(), value.clone());
        }
    }
    Ok(projected)
}

fn count_argument(stage: &str, value: &Bson) -> Result<usize, CmdError> {
    match value {
        Bson::Int32(v) if *v >= 0 => Ok(*v as usize),
        Bson::Int64(v) if *v >= 0 => Ok(*v as usize),
        Bson::Double(v) if *v >= 0.0 && v.fract() == 0.0 => Ok(*v as usize),
        _ => Err(bad_value(format!("invalid argument to {stage} stage"))),
    }
}

fn expression(document: &Document, value: &Bson) -> Bson {
    match value {
        Bson::String(path) if path.starts_with('$') => {
            lookup(document, &path[1..]).cloned().unwrap_or(Bson::Null)
        }
        other => other.clone(),
    }
}

/// Numeric sum as the server types it: int32 until it overflows, then int64; double if any is.
pub fn add(a: &Bson, b: &Bson) -> Bson {
    match (a, b) {
        (Bson::Int32(x), Bson::Int32(y)) => x
            .checked_add(*y)
            .map(Bson::Int32)
            .unwrap_or(Bson::Int64(*x as i64 + *y as i64)),
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            let x = as_f64(a).unwrap_or_default() as i64;
            let y = as_f64(b).unwrap_or_default() as i64;
            Bson::Int64(x + y)
        }
        _ => Bson::Double(as_f64(a).unwrap_or_default() + as_f64(b).unwrap_or_default()),
    }
}

fn group(documents: Vec<Document>, specification: &Document) -> Result<Vec<Document>, CmdError> {
    let key = specification
        .get("_id")
        .ok_or_else(|| CmdError::new(15955, "a group specification must include an _id"))?;
    let mut accumulators = Vec::new();
    for (field, accumulator) in specification.iter().filter(|(f, _)| *f != "_id") {
        let accumulator = accumulator
            .as_document()
            .filter(|d| d.len() == 1)
            .ok_or_else(|| {
                CmdError::new(
                    40234,
                    format!("The field '{field}' must be an accumulator object"),
                )
            })?;
        let (operator, argument) = accumulator.iter().next().expect("one entry");
        if operator != "$sum" {
            return Err(CmdError::new(
                15952,
                format!("unknown group operator '{operator}'"),
            ));
        }
        accumulators.push((field.clone(), argument.clone()));
    }
    let mut groups: Vec<(Bson, Vec<Bson>)> = Vec::new();
    for document in &documents {
        let id = match key {
            Bson::Document(fields) => {
                let mut composite = Document::new();
                for (name, value) in fields {
                    composite.insert(name.clone(), expression(document, value));
                }
                Bson::Document(composite)
            }
            other => expression(document, other),
        };
        let index = match groups.iter().position(|(existing, _)| equal(existing, &id)) {
            Some(index) => index,
            None => {
                groups.push((id, vec![Bson::Int32(0); accumulators.len()]));
                groups.len() - 1
            }
        };
        for (slot, (_, argument)) in accumulators.iter().enumerate() {
            let value = expression(document, argument);
            if as_f64(&value).is_some() {
                groups[index].1[slot] = add(&groups[index].1[slot], &value);
            }
        }
    }
    Ok(groups
        .into_iter()
        .map(|(id, sums)| {
            let mut output = doc! { "_id": id };
            for ((field, _), sum) in accumulators.iter().zip(sums) {
                output.insert(field.clone(), sum);
            }
            output
        })
        .collect())
}

/// Runs a pipeline of `$match $sort $skip $limit $project $group $count` over `documents`.
pub fn aggregate(mut documents: Vec<Document>, pipeline: &[Bson]) -> Result<Vec<Document>, CmdError> {
    for stage in pipeline {
        let stage = stage.as_document().filter(|s| s.len() == 1).ok_or_else(|| {
            CmdError::new(
                40323,
                "A pipeline stage specification object must contain exactly one field.",
            )
        })?;
        let (name, argument) = stage.iter().next().expect("one field");
        let as_document = || {
            argument
                .as_document()
                .ok_or_else(|| bad_value(format!("the {name} stage specification must be an object")))
        };
        documents = match name.as_str() {
            "$match" => {
                let filter = as_document()?;
                let mut kept = Vec::new();
                for document in documents {
                    if matches(&document, filter)? {
                        kept.push(document);
                    }
                }
                kept
            }
            "$sort" => {
                sort(&mut documents, as_document()?)?;
                documents
            }
            "$skip" => documents
                .into_iter()
                .skip(count_argument(name, argument)?)
                .collect(),
            "$limit" => documents
                .into_iter()
                .take(count_argument(name, argument)?)
                .collect(),
            "$project" => {
                let projection = as_document()?;
                documents
                    .iter()
                    .map(|d| project(d, projection))
                    .collect::<Result<_, _>>()?
            }
            "$group" => group(documents, as_document()?)?,
            "$count" => {
                let field = argument
                    .as_str()
                    .filter(|f| !f.is_empty() && !f.starts_with('$'))
                    .ok_or_else(|| bad_value("the count field must be a non-empty string"))?;
                if documents.is_empty() {
                    Vec::new()
                } else {
                    vec![doc! { field: documents.len() as i32 }]
                }
            }
            other => {
                return Err(CmdError::new(
                    40324,
                    format!("Unrecognized pipeline stage name: '{other}'"),
                ));
            }
        };
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use bson::{bson, oid::ObjectId};

    use super::*;

    #[test]
    fn numbers_compare_by_value_across_types_and_types_by_bracket() {
        assert!(equal(&Bson::Int32(1), &Bson::Double(1.0)));
        assert!(equal(&Bson::Int64(5), &Bson::Int32(5)));
        assert_eq!(
            compare(&Bson::Int32(2), &Bson::String("1".into())),
            Ordering::Less
        );
        assert_eq!(compare(&Bson::Null, &Bson::Int32(0)), Ordering::Less);
        let (a, b) = (ObjectId::new(), ObjectId::new());
        assert_eq!(compare(&Bson::ObjectId(a), &Bson::ObjectId(b)), Ordering::Less);
    }

    #[test]
    fn filters_match_as_the_server_does() {
        let document = doc! { "_id": 1, "a": "x", "tags": ["p", "q"], "n": { "k": 3 } };
        let cases = [
            (doc! {}, true),
            (doc! { "_id": 1.0 }, true),
            (doc! { "a": "y" }, false),
            (doc! { "tags": "q" }, true),
            (doc! { "n.k": { "$gte": 3, "$lt": 4 } }, true),
            (doc! { "n.k": { "$gt": "2" } }, false),
            (doc! { "missing": null }, true),
            (doc! { "missing": { "$exists": true } }, false),
            (doc! { "_id": { "$in": [5, 1] } }, true),
            (doc! { "$or": [{ "a": "z" }, { "_id": 1 }] }, true),
            (doc! { "a": { "$ne": "x" } }, false),
        ];
        for (filter, expected) in cases {
            assert_eq!(matches(&document, &filter).unwrap(), expected, "{filter}");
        }
        assert_eq!(
            matches(&document, &doc! { "a": { "$regex": "x" } })
                .unwrap_err()
                .code,
            2
        );
        assert_eq!(matches(&document, &doc! { "$where": "1" }).unwrap_err().code, 2);
    }

    #[test]
    fn count_documents_pipeline() {
        let documents: Vec<Document> = (0..5).map(|i| doc! { "_id": i, "even": i % 2 == 0 }).collect();
        let pipeline = vec![
            bson!({ "$match": { "even": true } }),
            bson!({ "$group": { "_id": 1, "n": { "$sum": 1 } } }),
        ];
        assert_eq!(
            aggregate(documents.clone(), &pipeline).unwrap(),
            vec![doc! { "_id": 1, "n": 3 }]
        );
        let none = vec![
            bson!({ "$match": { "_id": 99 } }),
            bson!({ "$group": { "_id": 1, "n": { "$sum": 1 } } }),
        ];
        assert!(aggregate(documents.clone(), &none).unwrap().is_empty());
        let paged = vec![
            bson!({ "$sort": { "_id": -1 } }),
            bson!({ "$skip": 1 }),
            bson!({ "$limit": 2 }),
        ];
        let ids: Vec<i32> = aggregate(documents.clone(), &paged)
            .unwrap()
            .iter()
            .map(|d| d.get_i32("_id").unwrap())
            .collect();
        assert_eq!(ids, vec![3, 2]);
        let unknown = vec![bson!({ "$lookup": {} })];
        assert_eq!(aggregate(documents, &unknown).unwrap_err().code, 40324);
    }

    #[test]
    fn projections_include_or_exclude() {
        let document = doc! { "_id": 1, "a": 1, "b": 2 };
        assert_eq!(
            project(&document, &doc! { "a": 1 }).unwrap(),
            doc! { "_id": 1, "a": 1 }
        );
        assert_eq!(
            project(&document, &doc! { "a": 0, "_id": 0 }).unwrap(),
            doc! { "b": 2 }
        );
        assert!(project(&document, &doc! { "a": 1, "b": 0 }).is_err());
    }
}
