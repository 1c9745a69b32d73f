//! The shared conformance suite on PostgreSQL, each case in a schema of its own. Skipped
//! without `SKED_TEST_DATABASE_URL`, except under CI, where that is a failure.

sked_store::conformance_tests!(sked_postgres::testing::pooled_store());
