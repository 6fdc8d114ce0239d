//! One forced growth step, written once for every owner of a table: for
//! models and tests that race adds against a growth.

use super::table::ShardTable;

/// An owner of a [`ShardTable`] that a test can grow on demand.
pub(crate) trait GrowOnce {
    /// The owner's table, ready to grow (a set makes its base row first,
    /// as its `split` does), and its lines per row.
    fn table_to_grow(&self) -> (&ShardTable, usize);

    /// Forces one growth step, as a repeated collision would.
    fn grow_once(&self) {
        let (table, row_lines) = self.table_to_grow();
        table.grow(table.load(), row_lines);
    }
}
