-- Expected verdict: TLE. The right update, but SLEEP(3) runs for each row the server examines
-- (15 seconds or more in total, against a 2 second limit). The judge has to stop it with a
-- statement time limit or KILL QUERY. In MySQL, max_execution_time applies to SELECT only.
UPDATE employees e
JOIN departments d ON d.id = e.department_id
SET e.salary = LEAST(ROUND(e.salary * 1.10, 2), 9000.00)
WHERE SLEEP(3) = 0
  AND d.name = 'Engineering'
  AND e.hired_on < '2020-01-01'
  AND e.salary < 9000.00;
