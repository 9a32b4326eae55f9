//! The values both backends store and read back ([`Value`], [`Row`]), their conversions to and
//! from rusqlite's and rust-postgres' types, and the PostgreSQL dialect of the shared SQL
//! ([`pg_sql`], [`pg_ddl`]): what [`super::backend`] and [`super::pg`] both use.

use std::error::Error;

/// One SQL value, as both backends store it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Real(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl<T: Clone + Into<Value>> From<&Option<T>> for Value {
    fn from(v: &Option<T>) -> Value {
        v.clone().map_or(Value::Null, Into::into)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// A row read back, with typed access by column.
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value, String> {
        self.0.get(i).ok_or_else(|| format!("column {i} missing"))
    }
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, String> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            v => Err(format!("column {i}: an integer expected, found {v:?}")),
        }
    }
    pub fn int(&self, i: usize) -> Result<i64, String> {
        self.opt_int(i)?
            .ok_or_else(|| format!("column {i}: NULL where an integer is required"))
    }
    pub fn opt_real(&self, i: usize) -> Result<Option<f64>, String> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Real(v) => Ok(Some(*v)),
            Value::Int(v) => Ok(Some(*v as f64)),
            v @ Value::Text(_) => Err(format!("column {i}: a number expected, found {v:?}")),
        }
    }
    pub fn real(&self, i: usize) -> Result<f64, String> {
        self.opt_real(i)?
            .ok_or_else(|| format!("column {i}: NULL where a number is required"))
    }
    pub fn opt_text(&self, i: usize) -> Result<Option<String>, String> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            v => Err(format!("column {i}: text expected, found {v:?}")),
        }
    }
    pub fn text(&self, i: usize) -> Result<String, String> {
        self.opt_text(i)?
            .ok_or_else(|| format!("column {i}: NULL where text is required"))
    }
}

pub(crate) fn sqlite_value(v: rusqlite::types::ValueRef<'_>) -> rusqlite::Result<Value> {
    use rusqlite::types::ValueRef;
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(f) => Value::Real(f),
        ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(_) => {
            return Err(rusqlite::Error::InvalidColumnType(
                0,
                "blob".into(),
                rusqlite::types::Type::Blob,
            ))
        }
    })
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as V, ValueRef};
        Ok(match self {
            Value::Null => ToSqlOutput::Owned(V::Null),
            Value::Int(i) => ToSqlOutput::Owned(V::Integer(*i)),
            Value::Real(f) => ToSqlOutput::Owned(V::Real(*f)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

type BoxError = Box<dyn Error + Sync + Send>;

impl postgres::types::ToSql for Value {
    /// Encodes for the column's type, which the server infers from the statement.
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, BoxError> {
        use postgres::types::Type;
        match (self, ty) {
            (Value::Null, _) => Ok(postgres::types::IsNull::Yes),
            (Value::Int(i), &Type::INT8) => i.to_sql(ty, out),
            (Value::Int(i), &Type::INT4) => i32::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::INT2) => i16::try_from(*i)?.to_sql(ty, out),
            (Value::Int(i), &Type::FLOAT8) => (*i as f64).to_sql(ty, out),
            (Value::Real(f), &Type::FLOAT8) => f.to_sql(ty, out),
            (Value::Text(s), _) => s.as_str().to_sql(ty, out),
            (v, t) => Err(format!("cannot store {v:?} in a column of type {t}").into()),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

impl<'a> postgres::types::FromSql<'a> for Value {
    fn from_sql(ty: &postgres::types::Type, raw: &'a [u8]) -> Result<Value, BoxError> {
        use postgres::types::Type;
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => Value::Text(String::from_sql(ty, raw)?),
            _ => return Err(format!("a column of type {ty}, which the history does not use").into()),
        })
    }

    fn from_sql_null(_: &postgres::types::Type) -> Result<Value, BoxError> {
        Ok(Value::Null)
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }
}

/// `?N` placeholders (outside quoted text) as PostgreSQL's `$N`.
pub fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '?' && !quoted && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// The schema's statements in PostgreSQL's types (see the module comment).
pub fn pg_ddl(sql: &str) -> String {
    let sql = sql.replace(
        "INTEGER PRIMARY KEY",
        "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    );
    let mut out = String::with_capacity(sql.len() + 64);
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(match word.as_str() {
            "INTEGER" => "BIGINT",
            "REAL" => "DOUBLE PRECISION",
            "TEXT" => "TEXT COLLATE \"C\"",
            w => w,
        });
        word.clear();
    };
    let mut quoted = false;
    for c in sql.chars() {
        if c == '\'' {
            quoted = !quoted;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dialects_differ_only_where_translated() {
        assert_eq!(
            pg_sql("SELECT id FROM runs WHERE a = ?1 AND b = '?2' AND c = ?12"),
            "SELECT id FROM runs WHERE a = $1 AND b = '?2' AND c = $12"
        );
        assert_eq!(
            pg_ddl("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, x REAL, s TEXT CHECK (s IN ('REAL')), INTEGERS TEXT)"),
            "CREATE TABLE t (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, n BIGINT NOT NULL, x DOUBLE PRECISION, s TEXT COLLATE \"C\" CHECK (s IN ('REAL')), INTEGERS TEXT COLLATE \"C\")"
        );
    }
}
