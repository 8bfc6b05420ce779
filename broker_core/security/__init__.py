"""Who a client is and what it may do: principals, authentication and authorization."""
