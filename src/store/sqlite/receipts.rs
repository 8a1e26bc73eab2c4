//! Delivery receipts on SQLite.

use super::{SqliteStore, q};
use crate::store::{NewReceipt, ReceiptOutcome, ReceiptStore, StoreResult};
use async_trait::async_trait;

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
        let mut tx = self.writer.begin().await?;
        let out = q::receipt_record(&mut tx, &receipt).await?;
        tx.commit().await?;
        Ok(out)
    }
}
