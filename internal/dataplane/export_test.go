package dataplane

// SetAfterDeployCheck makes f run in each deploy of dp once its document has been checked
// against the tenant's pipelines, before anything is written; nil removes it.
func SetAfterDeployCheck(dp *Plane, f func()) { dp.afterDeployCheck = f }
