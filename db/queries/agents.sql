-- name: OperationListForAgent :many
-- The operations of one workflow of one tenant, for the HTTP intent API's
-- agents: the newest first, through operations_workflow_idx.
SELECT * FROM operations
WHERE workflow_id = @workflow_id AND tenant = @tenant
  AND (sqlc.narg('state')::text IS NULL OR state = sqlc.narg('state')::text)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows;
