"""The page's inline style sheet and its one script (sortable tables); nothing is fetched."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{background:#1f3b57;color:#fff;padding:12px 24px}header h1{margin:0;font-size:22px}header p{margin:4px 0;opacity:.85}
nav a{color:#cfe3ff;margin-right:2px}main{padding:8px 24px 40px;max-width:1400px}
h2{border-bottom:2px solid #1f3b57;padding-bottom:2px;margin-top:28px}h3{margin-bottom:4px}
ul.findings{background:#fff;border-left:4px solid #d9822b;padding:8px 8px 8px 26px;margin:8px 0}
.top{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}.top .left{flex:0 1 540px}
.top .right{flex:1 1 600px}.top svg.fig{width:290px;height:auto}.top figcaption{max-width:290px}.top h2{margin-top:12px}
table{border-collapse:collapse;background:#fff;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.sortable th{cursor:pointer;background:#eef2f6}table.sortable th:hover{background:#dde6ef}
.figs{display:flex;flex-wrap:wrap;gap:14px}figure{margin:6px 0;background:#fff;padding:6px;border:1px solid #e2e2e2}
figure img{max-width:640px;height:auto;display:block}figcaption{font-size:12px;max-width:340px;color:#444}
svg.fig text{font-size:10px;fill:#333}.frame{fill:#fff;stroke:#999}.nofill{fill:none}.diag{stroke:#888;stroke-dasharray:4 3}
.bar{fill:#4f81bd;opacity:.85}.gap{fill:#d9534f;opacity:.8}.hist{fill:#9e9e9e}.empty{fill:#eee;stroke:#fff}
.cellr{stroke:#fff}.cellt{font-size:9px}polyline.line{fill:none;stroke-width:1.6}.dot{stroke:none}
.s0{stroke:#1f77b4;fill:#1f77b4}.s1{stroke:#d62728;fill:#d62728}.s2{stroke:#2ca02c;fill:#2ca02c}
.s3{stroke:#9467bd;fill:#9467bd}.s4{stroke:#ff7f0e;fill:#ff7f0e}.s5{stroke:#8c564b;fill:#8c564b}
.s0t{fill:#1f77b4}.s1t{fill:#d62728}.s2t{fill:#2ca02c}.s3t{fill:#9467bd}.s4t{fill:#ff7f0e}.s5t{fill:#8c564b}
.thumbs{display:flex;flex-wrap:wrap;gap:8px}.th figcaption{text-align:center}
.detbox{fill:none;stroke:#e00;stroke-width:2}.gtbox{fill:none;stroke:#0b0;stroke-width:2}
.gtother{fill:none;stroke:#0b0;stroke-width:1.5;stroke-dasharray:4 2}
.note{color:#555;font-size:12px}pre{background:#fff;border:1px solid #ddd;padding:8px;overflow:auto;max-height:400px}
.better{color:#1a7f37}.worse{color:#c62828;font-weight:bold}td.nw{white-space:nowrap}line.line{stroke-width:2.5}
footer{color:#777;font-size:12px;padding:0 24px 24px}
"""

SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function(t){
  t.querySelectorAll('th').forEach(function(th,i){
    th.addEventListener('click',function(){
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows),asc=th.dataset.dir!=='asc';
      th.dataset.dir=asc?'asc':'desc';
      rows.sort(function(r1,r2){
        var a=r1.cells[i],c=r2.cells[i];if(!a||!c)return 0;
        var x=a.dataset.sort,y=c.dataset.sort;
        if(x!==undefined&&y!==undefined){return asc?parseFloat(x)-parseFloat(y):parseFloat(y)-parseFloat(x);}
        return asc?a.textContent.localeCompare(c.textContent):c.textContent.localeCompare(a.textContent);
      });
      rows.forEach(function(r){b.appendChild(r);});
    });
  });
});
"""
