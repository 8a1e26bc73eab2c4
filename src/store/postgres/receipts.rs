//! Delivery receipts on Postgres.

use super::{PostgresStore, q};
use crate::store::{NewReceipt, ReceiptOutcome, ReceiptStore, StoreResult};
use async_trait::async_trait;

#[async_trait]
impl ReceiptStore for PostgresStore {
    async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
        let mut tx = self.pool.begin().await?;
        let out = q::receipt_record(&mut tx, &receipt).await?;
        tx.commit().await?;
        Ok(out)
    }
}
