// Stub for bull (see ../README.md): loaded only by createPersistenceQueue(), which the
// ingestd client tests never call.
'use strict';
module.exports = function Queue() {
    throw new Error('bull is stubbed out in ingestd tests/clients: no Redis persistence queue');
};
