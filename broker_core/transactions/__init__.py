"""The transaction coordinator (KIP-98, KIP-890 part 1): transactional ids, their state in DynamoDB,
coordinator leases, transaction markers and timeouts."""
