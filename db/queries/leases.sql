-- name: LeaseHolder :one
SELECT * FROM entity_leases WHERE entity_type = @entity_type AND entity_id = @entity_id;
