//! A canonical, order-independent text dump of every table: crash tests compare it before and
//! after an aborted transaction to prove the content did not change.

use rusqlite::types::ValueRef;

use super::{Store, StoreResult};

impl Store {
    /// Every row of every table, tables by name and rows sorted by all columns.
    pub fn canonical_dump(&self) -> StoreResult<String> {
        let tables: Vec<String> = self
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let mut out = String::new();
        for table in tables {
            let mut stmt = self.conn.prepare(&format!("SELECT * FROM \"{table}\""))?;
            let n = stmt.column_count();
            let mut rows: Vec<String> = stmt
                .query_map([], |r| {
                    let mut cells = Vec::with_capacity(n);
                    for i in 0..n {
                        cells.push(match r.get_ref(i)? {
                            ValueRef::Null => "NULL".to_owned(),
                            ValueRef::Integer(v) => v.to_string(),
                            ValueRef::Real(v) => v.to_string(),
                            ValueRef::Text(t) => format!("{:?}", String::from_utf8_lossy(t)),
                            ValueRef::Blob(b) => format!("x'{}'", hex::encode(b)),
                        });
                    }
                    Ok(cells.join("|"))
                })?
                .collect::<Result<_, _>>()?;
            rows.sort();
            out.push_str(&format!("## {table} ({} rows)\n", rows.len()));
            for row in rows {
                out.push_str(&row);
                out.push('\n');
            }
        }
        Ok(out)
    }
}
