package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// A backlog of 100,000 pods is created with many workers at once; an API server on a
// loaded machine answers some of them with a timeout ("resource quota evaluation
// timed out", a 504, a 429) and the whole run used to fail there. create retries
// such answers with a growing pause, and counts an object found already there on a
// retry as created (the first attempt reached etcd, its answer did not come back).

// retryBase is the first pause; it doubles up to retryMax, for retryAttempts tries.
var (
	retryBase     = 200 * time.Millisecond
	retryMax      = 10 * time.Second
	retryAttempts = 10
)

// transient says whether an API error is worth another try: the API server's
// timeouts and overload answers, and a connection or HTTP/2 stream that broke under
// load (drain-100k once failed at pod 45,973 on "stream error: ... INTERNAL_ERROR;
// received from peer").
func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) ||
		utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		strings.Contains(err.Error(), "stream error:")
}

// create runs f until it succeeds, fails for good, or retryAttempts tries were
// answered with a transient error.
func create(ctx context.Context, what string, f func(ctx context.Context) error) error {
	pause := retryBase
	var err error
	for attempt := 1; attempt <= retryAttempts; attempt++ {
		err = f(ctx)
		switch {
		case err == nil:
			return nil
		case attempt > 1 && apierrors.IsAlreadyExists(err):
			return nil
		case !transient(err):
			return fmt.Errorf("create %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w (after %v)", what, ctx.Err(), err)
		case <-time.After(pause):
		}
		pause = min(2*pause, retryMax)
	}
	return fmt.Errorf("create %s: %d tries answered with a transient error, the last: %w", what, retryAttempts, err)
}
